// Everything a program that uses kiln needs: tensors, the functional ops, random numbers and
// autograd. `#include "core/kiln.h"` and go.
#pragma once

#include "autograd/engine.h"
#include "autograd/gradcheck.h"
#include "autograd/node.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/precision.h"
#include "core/random.h"
#include "core/shape.h"
#include "core/tensor.h"
