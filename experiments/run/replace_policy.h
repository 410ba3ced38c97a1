// experiments/run/replace_policy.h — what `asgdsim run` and `asgdsim cluster` may replace of
// what earlier processes left in an experiment folder (--rerun, --supersede). Only the
// policy; experiments/run/run_parts.h applies it (earlier_run, refuse_runs_of_other_configs).
#pragma once

namespace asgd {

// What a run may replace of what earlier processes left (docs/cli.md). The two are apart
// so that tidying a folder (supersede) never re-runs a finished run, and re-running
// (rerun) never moves another config's runs. supersede deletes nothing (it moves folders
// aside); rerun replaces only results of this very config, which the re-run makes again.
struct ReplacePolicy {
  bool rerun = false;      // --rerun: runs of this config already done are made again
  bool supersede = false;  // --supersede: run folders of another config are moved aside
};

}  // namespace asgd
