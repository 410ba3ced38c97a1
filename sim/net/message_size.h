// sim/net/message_size.h — the bytes of the messages that are not a full parameter vector: a
// sparse model's row messages (the rows a minibatch reads or its gradient touches) and a
// dense model's compressed gradients (top-k, int8). The formulas, and how the proxy size
// cluster.network.message_bytes scales them, are in docs/architecture.md (The time
// model, Message sizes). Not here: the links that carry them (sim/net/topology.h), the
// compression arithmetic (kernels/ops.h).
#pragma once
#include <cstddef>
#include <string>
#include "sim/net/topology.h"

namespace asgd {

// An index on the wire: a row of a table, or a position in a top-k gradient.
inline constexpr int kIndexBytes = 4;

// How gradients are compressed (cluster.network.compression). Dense models only. top-k
// and int8 compress each pushed gradient; PowerSGD compresses an all-reduce's (sync's
// collectives: engines/powersgd.h), and no push.
struct CompressionSpec {
  enum class Type { None, TopK, Int8, PowerSgd } type = Type::None;
  double ratio = 0.01;                   // top-k: the fraction of values kept
  bool error_feedback = false;           // keep what was not sent in a per-worker residual
  int rank = 1;                          // PowerSGD: the approximation's rank r
  double min_compression_rate = 2;       // PowerSGD: compress a matrix only if it shrinks more than this
  double orthogonalization_epsilon = 0;  // PowerSGD: added to each column's norm
  bool warm_start = true;                // PowerSGD: start each iteration's power step from the last Q
  bool compresses_pushes() const { return type == Type::TopK || type == Type::Int8; }
};
CompressionSpec::Type compression_type(const std::string& name);  // "none", "topk", "int8", "powersgd"
const char* compression_type_name(CompressionSpec::Type type);    // its word, as the config writes it

// Values a top-k push keeps of n: ceil(ratio x n), at least 1 and at most n.
size_t topk_count(double ratio, size_t n);

// Bytes of a message whose exact encoding takes `exact` bytes, for a model of `values`
// parameters: `exact` itself, or, with a proxy size (spec.message_bytes > 0), the same
// fraction of the proxy as `exact` is of the full message (values x bytes per value).
double scaled_message_bytes(const NetworkSpec& spec, size_t values, double exact);

// A row message: `rows` rows of a table of width `width` (each row: its index and width
// values) and the `dense` values outside the table. Scaled as above.
double row_message_bytes(const NetworkSpec& spec, size_t values, size_t rows, size_t width, size_t dense);

// A compressed gradient of `values` parameters: top-k, k x (index + value bytes); int8,
// one byte per value and a 4-byte fp32 scale; none, the full message. Scaled as above.
double compressed_message_bytes(const NetworkSpec& spec, size_t values, const CompressionSpec& c);

// The bytes of the two messages around one step (sim/core/runtime.h, Step): its pull or
// reply, and its push. A gradient step on pulled parameters (`gradient_pull`: Step::gradient
// with a pull) of a model with a row table (`table_rows` rows of `width`) pushes only the
// `touched` rows and the dense rest, and pulls the same with `sparse_pull`; of a dense
// model it pushes its gradient compressed as `c` says. Every other message is a full
// parameter vector (message_bytes). Both runtimes count their messages at these sizes.
struct StepMessageBytes {
  double pull = 0;          // the pull or the reply (when the step receives one)
  double push = 0;          // the push (when the step sends one)
  bool compressed = false;  // the push is a compressed gradient
};
StepMessageBytes step_message_bytes(const NetworkSpec& spec, size_t values, size_t table_rows, size_t width,
                                    size_t touched, bool gradient_pull, bool sparse_pull, const CompressionSpec& c);

}  // namespace asgd
