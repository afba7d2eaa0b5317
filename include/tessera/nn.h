#pragma once
/// Neural-network modules, losses and initializers (namespace tessera::nn).
#include "tessera/nn/activation.h"
#include "tessera/nn/checkpoint.h"
#include "tessera/nn/conv.h"
#include "tessera/nn/dropout.h"
#include "tessera/nn/flatten.h"
#include "tessera/nn/init.h"
#include "tessera/nn/linear.h"
#include "tessera/nn/loss.h"
#include "tessera/nn/models.h"
#include "tessera/nn/module.h"
#include "tessera/nn/normalization.h"
#include "tessera/nn/sequential.h"
