// Everything for building models: the Module API, the layers, losses and init functions.
// `#include "layers/nn.h"` and write `nn::Linear`, `nn::Conv2d`, ...
#pragma once

#include "layers/activation.h"
#include "layers/container.h"
#include "layers/conv.h"
#include "layers/dropout.h"
#include "layers/init.h"
#include "layers/linear.h"
#include "layers/loss.h"
#include "layers/module.h"
#include "layers/normalization.h"
#include "layers/pooling.h"
