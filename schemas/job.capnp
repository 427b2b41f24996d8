@0xb4fe560b1a5745d9;
# A phobos job: one kernel, a value for every dimension, the scalars and a storage URI per tensor.
#
# Written by `phobos-sched new-job`, read by `phobos-sched JOB` and `phobos-sched show-job`.
# The kernel's source text travels inside the job, so a job file is self-contained: editing the
# .phk file afterwards does not change a job already written.
#
# URIs: `file:///abs/path.npy` (absolute), or `file:rel/path.npy` (relative: resolved against the
# directory holding the job file when the job is run). No other scheme is accepted.

using P = import "program.capnp";

struct Job {
  format @0 :UInt32 = 1;          # bumped on an incompatible change; readers refuse unknown ones
  kernelName @1 :Text;            # the kernel to run (a file may hold several)
  kernelSource @2 :Text;          # the whole .phk source file
  kernelFile @3 :Text;            # where the source was read from (for messages only)
  dims @4 :List(P.NamedValue);    # a value for every symbolic dimension of the kernel's tensors
  scalars @5 :List(Scalar);       # a value for every scalar parameter
  tensors @6 :List(Tensor);       # a URI for every tensor parameter
  clusterValues @7 :List(P.NamedValue);  # optional: pinned @cluster values (default: each one's first)
  tileValues @8 :List(P.NamedValue);     # optional: pinned leaf @autotune values (default: each one's first)
  split @9 :Split;                # optional: the cluster loop split over nodes (unset or 0 shares: not split)

  struct Split {
    shares @0 :UInt32;            # how many nodes share each output's chunks
    tree @1 :Text;                # the reduction tree: flat, binary or hosts
    hosts @2 :List(UInt32);       # for hosts: each host's share count
  }

  struct Scalar {
    name @0 :Text;
    value @1 :Float64;            # converted to the parameter's declared type (f32 or i32) on use
  }

  struct Tensor {
    name @0 :Text;
    uri @1 :Text;
  }
}
