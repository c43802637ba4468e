// The TfxlaLaunch op's interface: inputs, outputs, attrs (with what each means), the shape function
// (static output shapes from `output_shapes`). Included by tfxla_launch.cc only, which registers the
// CPU kernel.
#ifndef TFXLA_OPS_OP_DEF_H_
#define TFXLA_OPS_OP_DEF_H_

#include <vector>

#include "absl/status/status.h"
#include "kernel_file.h"  // InvalidArgument
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/platform/errors.h"  // TF_RETURN_IF_ERROR

namespace tfxla {

REGISTER_OP("TfxlaLaunch")
    .Input("kernel_path: string")
    .Input("args: Tin")
    .Output("results: Tout")
    .Attr("Tin: list(type) >= 0")
    .Attr("Tout: list(type) >= 0")
    .Attr("output_shapes: list(shape) >= 0")
    .Attr("cluster: string")
    .Attr("kernel_hash: string")
    .Attr("cluster_graph: string = ''")
    .Attr("cluster_io: string = ''")
    .Attr("batch_tiles: list(int) = []")
    .Attr("batched_args: list(int) = []")
    .Attr("batched_results: list(int) = []")
    .Attr("kernel_hashes: list(string) = []")
    .Attr("source_hashes: list(string) = []")
    .Attr("cpu_features: list(string) = []")
    .Attr("rebuild_commands: list(string) = []")
    .Attr("backend: string = ''")
    .Attr("source_suffix: string = ''")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) -> absl::Status {
      std::vector<tensorflow::PartialTensorShape> shapes;
      TF_RETURN_IF_ERROR(c->GetAttr("output_shapes", &shapes));
      if (static_cast<int>(shapes.size()) != c->num_outputs())
        return InvalidArgument("TfxlaLaunch: ", c->num_outputs(), " output types but ", shapes.size(),
                               " output_shapes");
      tensorflow::shape_inference::ShapeHandle unused;
      TF_RETURN_IF_ERROR(c->WithRankAtMost(c->input(0), 1, &unused));
      for (int i = 0; i < c->num_outputs(); ++i) {
        tensorflow::shape_inference::ShapeHandle s;
        TF_RETURN_IF_ERROR(c->MakeShapeFromPartialTensorShape(shapes[i], &s));
        c->set_output(i, s);
      }
      return absl::OkStatus();
    })
    .Doc(R"doc(
Runs one compiled tfxla kernel (a plain C shared object, tfxla ABI version 2) on TensorFlow's
intra-op threads.

kernel_path: path of the kernel .so (a tensor, so a SavedModel Asset can feed it); with batch_tiles,
  a vector with one kernel per tile size.
args: the kernel's inputs, in parameter order; dtypes and shapes must be those it was compiled for.
results: the kernel's outputs (the ROOT tuple flattened).
output_shapes: static shapes of the results, for shape inference.
cluster: the name of the cluster this node replaced (used in error messages).
kernel_hash: sha256 (hex) of the kernel file; when non-empty a file with another hash is refused.
cluster_graph: serialized GraphDef of the original cluster (for the Python gradient; opaque here).
batch_tiles: when set, kernel i was compiled for batch_tiles[i] rows; a call with any batch size runs
  the rows tile by tile (the last tile padded), which hlo/analysis/batch.py proved equivalent.
batched_args, batched_results: 1 where dim 0 of that input/result is the batch dimension.
kernel_hashes: per-kernel sha256 (with batch_tiles, or with source_hashes).
source_hashes: per-kernel sha256 of the source `<kernel><source_suffix>` beside `<kernel>.so`: when
  set, a kernel file that is unusable here (wrong hash, missing CPU features) is rebuilt from that source
  with its rebuild command, if the source still has that hash.
cpu_features: /proc/cpuinfo flags the kernels were compiled for.
rebuild_commands: per kernel, the command that compiles its source (a JSON list: argv, with the elements
  "{source}" and "{output}" for the paths), run directly, without a shell (Backend.rebuild_command).
backend: the name of the backend that built the kernels (for messages).
source_suffix: how the kernels' sources are named (".c", ".cu").
)doc");

}  // namespace tfxla

#endif  // TFXLA_OPS_OP_DEF_H_
