// sim/timing/lr_schedule.h — the learning rate as a function of epochs (samples processed /
// training-set size), so epoch n has the same rate whatever the worker count.
//   peak = lr * scale                         (linear scaling rule: scale = k)
//   warm-up: epochs [0, warmup_epochs) ramp linearly from warmup_from to peak
//            (Goyal et al. 2017 start from the unscaled lr: warmup_from defaults to lr)
//   after:   constant | step (x gamma at each milestone epoch) | cosine (peak -> min_lr
//            over [warmup_epochs, total_epochs])
#pragma once
#include <string>
#include <vector>

namespace asgd {

struct LrScheduleSpec {
  std::string type = "constant";  // constant | step | cosine
  double lr = 0.1;
  double scale = 1.0;
  double warmup_epochs = 0.0;
  double warmup_from = -1.0;       // < 0: use lr
  std::vector<double> milestones;  // step: epochs at which the rate is multiplied by gamma
  double gamma = 0.1;
  double total_epochs = 0.0;  // cosine: end of the decay
  double min_lr = 0.0;        // cosine: final rate
};

class LrSchedule {
 public:
  explicit LrSchedule(LrScheduleSpec spec);
  double at(double epoch) const;
  const LrScheduleSpec& spec() const { return spec_; }

 private:
  enum class Kind { Constant, Step, Cosine };
  LrScheduleSpec spec_;
  Kind kind_ = Kind::Constant;  // spec_.type, parsed once: at() runs on every update
};

}  // namespace asgd
