// The typed interfaces of the pipeline's actors: exactly the messages each role accepts, checked by the compiler
// (Note [typed stage interfaces]).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/messages.hpp"

namespace ap {

using setup_atom = caf::atom_constant<caf::atom("setup")>;  // every rank's endpoint, once

// A stage's retriever: holds its peers' tasks until they are the next scheduled action
// (Note [mailbox as the queue]), and the step's control.
using retriever_actor = caf::typed_actor<
    caf::reacts_to<forward_task>,                               // from the previous stage or the coordinator
    caf::reacts_to<backward_task>,                              // from the next stage or the coordinator
    caf::reacts_to<begin_atom, std::uint64_t>,                  // coordinator: the step starts
    caf::reacts_to<abort_atom, std::uint64_t>,                  // coordinator: drop the step
    caf::reacts_to<task_done>,                                  // processor: it finished a task
    caf::reacts_to<timeout_atom, std::uint64_t, std::uint64_t>  // itself: check a wait (wait id, step)
    >;

// A stage's processor: runs what the retriever hands it, one task at a time.
using processor_actor = caf::typed_actor<
    caf::reacts_to<begin_atom, std::uint64_t>,  // retriever: the step starts (resets the peak stash)
    caf::reacts_to<run_forward>,                // retriever: the schedule's next actions
    caf::reacts_to<run_backward>,
    caf::reacts_to<run_weight>,
    caf::reacts_to<run_reduce>,
    caf::reacts_to<abort_atom, std::uint64_t>,                                     // coordinator: drop the step
    caf::replies_to<norm_atom, std::uint64_t>::with<gradient_norm>,                // coordinator
    // coordinator (Note [tied gradients across stages]): the gradient of the tied weight named ...
    caf::replies_to<tied_atom, std::uint64_t, std::string>::with<named_tensors>,
    caf::replies_to<tied_atom, std::uint64_t, named_tensors>::with<ok_atom>,        // ... and the other copy's added
    caf::replies_to<apply_atom, std::uint64_t, float>::with<ok_atom>,              // coordinator: clip factor
    caf::replies_to<params_atom>::with<named_tensors>,                             // facade: gather the model
    caf::replies_to<state_atom>::with<stage_state>,                                // facade: checkpoint, snapshot
    caf::replies_to<load_atom, stage_state>::with<stage_state_loaded>,             // facade: restore
    caf::replies_to<ring_atom>::with<std::vector<std::string>>,                    // facade: ring ports
    caf::replies_to<ring_atom, std::vector<std::string>>::with<std::string>        // facade: connect rings
    >;

// A stage's sender: hands finished tasks to the communicator, off the processor's thread.
using sender_actor = caf::typed_actor<
    // facade: every rank's endpoint and activation link (Note [activations on data links])
    caf::replies_to<setup_atom, std::vector<caf::actor>, std::vector<std::string>>::with<ok_atom>,
    caf::reacts_to<deliver_forward>,                                      // processor
    caf::reacts_to<deliver_backward>>;

// The coordinator: trains a batch when asked, takes the last stage's outputs, and hears every stage's end.
using coordinator_actor = caf::typed_actor<
    caf::reacts_to<setup_atom, std::vector<caf::actor>>,         // facade: every rank's endpoint
    caf::replies_to<train_batch>::with<step_result>,             // facade: one step
    caf::reacts_to<forward_task>,                                // last stage's sender: a microbatch's output
    caf::reacts_to<stage_done>,                                  // retrievers
    caf::reacts_to<stage_failed>,                                // retrievers
    caf::reacts_to<timeout_atom, std::uint64_t, std::uint64_t>  // itself: check the apply confirmations
    >;

// Whether `Handle` accepts the message (Ts...), as the compiler decides for a send.
template <class Handle, class... Ts>
inline constexpr bool accepts =
    caf::response_type_unbox<caf::signatures_of_t<Handle>, caf::detail::type_list<Ts...>>::valid;

// Tasks travel to a retriever (or the coordinator): the communicator's endpoints are exactly these.
static_assert(accepts<retriever_actor, forward_task> && accepts<retriever_actor, backward_task>);
static_assert(accepts<coordinator_actor, forward_task> && !accepts<coordinator_actor, backward_task>);
// Only the retriever decides the order: sending a task to a processor or sender directly does not compile.
static_assert(!accepts<processor_actor, forward_task> && !accepts<processor_actor, backward_task>);
static_assert(!accepts<sender_actor, forward_task> && !accepts<sender_actor, backward_task>);
static_assert(accepts<processor_actor, run_forward> && !accepts<retriever_actor, run_forward>);
// The processor reports to the retriever; stages to the coordinator.
static_assert(accepts<retriever_actor, task_done> && !accepts<coordinator_actor, task_done>);
static_assert(accepts<coordinator_actor, stage_done> && accepts<coordinator_actor, stage_failed>);
// Every role's list, counted: a change here also changes the README's message table.
static_assert(caf::detail::tl_size<retriever_actor::signatures>::value == 6);
static_assert(caf::detail::tl_size<processor_actor::signatures>::value == 15);
static_assert(caf::detail::tl_size<sender_actor::signatures>::value == 3);
static_assert(caf::detail::tl_size<coordinator_actor::signatures>::value == 6);

}  // namespace ap
