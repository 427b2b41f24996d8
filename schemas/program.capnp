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

struct CompiledLeaf {
  # A leaf compiled once by the scheduler for one GPU kind: a pod launches it as it is
  # (schemas/compiled_leaf.py holds the field meanings).
  leaf @0 :Text;                       # the leaf's name
  sourceHash @1 :Text;                 # what it was compiled from (compiled_leaf.leaf_hash)
  cc @2 :UInt32;                       # compute capability, major * 10 + minor
  codeKind @3 :Text;                   # "ptx" or "cubin"
  code @4 :Data;
  kernels @5 :List(KernelLaunch);      # launched in order on one stream
  tensors @6 :List(TensorParam);
  scalars @7 :List(ScalarParam);
  writes @8 :List(Text);
  tuned @9 :List(NamedValue);          # the tuned point: @autotune values
  schedule @10 :Text;
  scratch @11 :List(Scratch);
  needs @12 :List(Text);

  struct TensorParam {
    name @0 :Text;
    dtype @1 :Text;
    shape @2 :List(Int64);
  }

  struct ScalarParam {
    name @0 :Text;
    dtype @1 :Text;
  }

  struct Scratch {
    name @0 :Text;
    dtype @1 :Text;
    shape @2 :List(Int64);
    zeroed @3 :Bool;
  }

  struct KernelLaunch {
    entry @0 :Text;
    grid @1 :List(UInt32);
    block @2 :List(UInt32);
    sharedBytes @3 :UInt32;
    params @4 :List(Text);
    tensorMaps @5 :List(TensorMap);
  }

  struct TensorMap {
    param @0 :Text;
    tensor @1 :Text;
    boxRows @2 :UInt32;
    boxCols @3 :UInt32;
    rows @4 :UInt64;
    cols @5 :UInt64;
    dtype @6 :Text;
    outer @7 :List(UInt64);
  }
}
