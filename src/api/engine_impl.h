// api/engine_impl: what an Engine holds, shared by the files of the public API (engine.cpp,
// context.cpp).
#pragma once
#include <memory>

#include "backends/backend.h"
#include "models/model.h"
#include "runtime/session.h"
#include "sluice/sluice.h"

namespace sluice {

struct Engine::Impl {
  std::unique_ptr<Model> model;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Session> session;  // the sequence generate() runs on
};

}  // namespace sluice
