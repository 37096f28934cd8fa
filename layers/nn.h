// Everything for building models: the Module API, the layers, losses and init functions.
// `#include "kiln/layers/nn.h"` and write `nn::Linear`, `nn::Conv2d`, ...
#pragma once

#include "kiln/layers/activation.h"
#include "kiln/layers/container.h"
#include "kiln/layers/conv.h"
#include "kiln/layers/distributed.h"
#include "kiln/layers/dropout.h"
#include "kiln/layers/embedding.h"
#include "kiln/layers/init.h"
#include "kiln/layers/linear.h"
#include "kiln/layers/loss.h"
#include "kiln/layers/module.h"
#include "kiln/layers/normalization.h"
#include "kiln/layers/pooling.h"
