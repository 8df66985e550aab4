#include "actors/message_types.hpp"

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "network/ring_messages.hpp"

namespace ap {
namespace {

// The one table of message types: add_message_types and message_type_names both walk it. The name is the
// one each type's inspect() gives. Atoms, ints, strings and actor handles are CAF built-ins.
template <class Visitor>
void visit_message_types(Visitor& v) {
  v.template add<forward_task>("forward_task");
  v.template add<backward_task>("backward_task");
  v.template add<tensor_message>("tensor_message");
  v.template add<train_batch>("train_batch");
  v.template add<gradient_norm>("gradient_norm");
  v.template add<stage_done>("stage_done");
  v.template add<stage_failed>("stage_failed");
  v.template add<step_result>("step_result");
  v.template add<named_tensors>("named_tensors");
  v.template add<task_done>("task_done");
  v.template add<run_forward>("run_forward");
  v.template add<run_backward>("run_backward");
  v.template add<run_weight>("run_weight");
  v.template add<run_reduce>("run_reduce");
  v.template add<deliver_forward>("deliver_forward");
  v.template add<deliver_backward>("deliver_backward");
  v.template add<stage_spec>("stage_spec");
  v.template add<stage_state>("stage_state");
  v.template add<stage_state_loaded>("stage_state_loaded");
  v.template add<ring_abort>("ring_abort");
}

struct registrar {
  caf::actor_system_config& config;
  template <class T>
  void add(const char* name) {
    config.add_message_type<T>(name);
  }
};

struct name_list {
  std::vector<std::string> names;
  template <class T>
  void add(const char* name) {
    names.emplace_back(name);
  }
};

}  // namespace

void add_message_types(caf::actor_system_config& config) {
  registrar r{config};
  visit_message_types(r);
}

std::vector<std::string> message_type_names() {
  name_list n;
  visit_message_types(n);
  return n.names;
}

}  // namespace ap
