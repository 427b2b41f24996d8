@0xf86537b6d400394c;
# The one schema of a program's parts: what the cluster compiler produces and the scheduler and
# the pods share. rpc.capnp and job.capnp import it; schemas/program.py holds the dataclasses that
# mirror it (field meanings are theirs) and schemas/capnp_io.py the one converter. Units and
# launches never travel: the planner turns them into per-node instructions (rpc.capnp).
# Kept stable once committed: add fields at the end of a struct with a new ordinal, never renumber.

struct NamedValue {
  name @0 :Text;
  value @1 :Int64;
}

struct Region {
  # A box of a tensor in storage.
  tensor @0 :Text;
  start @1 :List(Int64);
  shape @2 :List(Int64);
}

struct TensorInfo {
  name @0 :Text;
  dtype @1 :Text;                      # storage dtype: f32, f16, bf16, i32
  shape @2 :List(Int64);               # the whole tensor in storage
  role @3 :Role;

  enum Role {
    input @0;                          # read, never written
    output @1;                         # written; its old contents are never needed
    inout @2;                          # written, and its old contents are read
    partial @3;                        # a split reduction's scratch: never in storage
  }
}

struct Leaf {
  # A leaf kernel: phobos source run on one super-tile, one launch at a time.
  name @0 :Text;                       # "main", or "init" / "step"
  kernel @1 :Text;                     # the kernel's name inside `source`
  source @2 :Text;                     # a complete phobos file holding `kernel`, no @cluster
  dims @3 :List(NamedValue);
  tileValues @4 :List(NamedValue);
  grid @5 :List(Int64);                # CTAs along x, y, z
  threads @6 :UInt32;
  tensors @7 :List(Text);              # tensor parameters, in declaration order
  scalars @8 :List(Text);              # scalar parameters, in declaration order
  flops @9 :UInt64;                    # estimated floating-point operations of one launch
}
