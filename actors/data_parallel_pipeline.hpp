// Data parallelism composed with the pipeline: D replicas of the whole pipeline, each on its share of every
// batch, whose stages all-reduce their gradients across the replicas.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "actors/pipeline.hpp"
#include "collective/local_group.hpp"
#include "stage/stage_state.hpp"

namespace ap {

class recovery;  // actors/recovery.hpp

// Note [data-parallel pipeline]: replica d trains on rows shard_rows(batch, D, d) scaled as the whole batch
// (Note [data-parallel stage]), so the result equals one process on the whole batch. Stage s's rank r of every
// replica forms one group; clipping uses post-reduction norms. A failed step fails everywhere with nothing
// applied and leaves this pipeline spent (Note [recovery with replicas] on nodes). Replica 0 answers queries.
class data_parallel_pipeline final : public step_runner {
 public:
  // `options` describes one replica; throws std::invalid_argument for D < 1 or what one replica refuses,
  // pipeline_error when the nodes' groups cannot connect.
  data_parallel_pipeline(const sequential& model, const pipeline_options& options, int data_parallel);
  ~data_parallel_pipeline() override;

  float train_step(const tensor& inputs, const tensor& labels, std::uint64_t step) override;
  tensor predict(const tensor& inputs) override;
  void save_checkpoint(const std::string& path, const training_state& state) override;
  training_state load_checkpoint(const std::string& path) override;
  std::vector<float> last_microbatch_losses() const override;

  int replicas() const { return static_cast<int>(replicas_.size()); }
  // Replica 0, which describes the run (plan, chunk ranges, events, busy times, gathered model).
  pipeline& first() { return *replicas_.front(); }
  // Every replica's ranks' cores, replica after replica (Note [cores per rank]).
  std::vector<compute_cores> cores() const;
  int restarts() const;

 private:
  void place_on_nodes(const sequential& model, const pipeline_options& options, int data_parallel);
  void connect_groups();  // on nodes
  float run_replicas(const tensor& inputs, const tensor& labels, std::uint64_t step);  // throws pipeline_error
  void make_recovery(const pipeline_options& options, int data_parallel);

  std::vector<std::unique_ptr<local_group>> groups_;  // stage s, rank r at s * T + r
  std::vector<std::unique_ptr<pipeline>> replicas_;
  std::unique_ptr<loss> loss_;
  sequential model_;           // first layers only, to check inputs
  std::string spent_;          // empty while usable
  // Note [recovery with replicas]
  std::vector<std::vector<stage_state>> snapshot_;  // per replica
  std::unique_ptr<recovery> recovery_;
};

}  // namespace ap
