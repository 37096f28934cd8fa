// Everything in optim/: the optimizers, the learning-rate schedulers and gradient clipping.
#pragma once

#include "optim/adadelta.h"
#include "optim/adam.h"
#include "optim/clip.h"
#include "optim/optimizer.h"
#include "optim/rmsprop.h"
#include "optim/scheduler.h"
#include "optim/sgd.h"
