// Everything in optim/: the optimizers, the learning-rate schedulers and gradient clipping.
#pragma once

#include "kiln/optim/adadelta.h"
#include "kiln/optim/adam.h"
#include "kiln/optim/captured_step.h"
#include "kiln/optim/clip.h"
#include "kiln/optim/optimizer.h"
#include "kiln/optim/rmsprop.h"
#include "kiln/optim/scheduler.h"
#include "kiln/optim/sgd.h"
