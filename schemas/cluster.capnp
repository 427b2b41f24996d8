@0xf86537b6d400394c;
# A cluster program (schemas/program.py): the super-tile grid, the leaf kernels and the
# units of work with the regions each launch reads and writes. Written by the cluster compiler
# (compiler/cluster/serialize.py: to_capnp / from_capnp), read by the scheduler and by tools.
# Field meanings are those of the dataclasses in program.py; every list keeps their order.

struct ClusterProgram {
  format @0 :UInt32 = 1;               # bumped on an incompatible change; readers refuse unknown ones
  kernel @1 :Text;                     # the kernel's name
  source @2 :Text;                     # the user's kernel source, at its original lines
  dims @3 :List(NamedValue);           # the problem's dimensions
  clusterValues @4 :List(NamedValue);  # the @cluster values chosen
  tileValues @5 :List(NamedValue);     # the @autotune values the leaves use
  superGrid @6 :List(Int64);           # super-tiles along each cluster grid axis, x first
  tensors @7 :List(TensorInfo);
  scalars @8 :List(Text);              # scalar parameter names; values come with the job
  leaves @9 :List(Leaf);
  units @10 :List(Unit);               # in row-major order of their coordinates
}

struct NamedValue {
  name @0 :Text;
  value @1 :Int64;
}

struct Region {
  tensor @0 :Text;
  start @1 :List(Int64);
  shape @2 :List(Int64);
}

struct TensorInfo {
  name @0 :Text;
  dtype @1 :Text;                      # storage dtype: f32, f16, bf16, i32
  shape @2 :List(Int64);
  role @3 :Role;

  enum Role {
    input @0;                          # read, never written
    output @1;                         # written; its old contents are never needed
    inout @2;                          # written, and its old contents are read
  }
}

struct Leaf {
  name @0 :Text;                       # "main", or "init" / "step"
  kernel @1 :Text;
  source @2 :Text;                     # a complete phobos file holding `kernel`, no @cluster
  dims @3 :List(NamedValue);
  tileValues @4 :List(NamedValue);
  grid @5 :List(Int64);                # CTAs along x, y, z
  threads @6 :UInt32;
  tensors @7 :List(Text);
  scalars @8 :List(Text);
  flops @9 :UInt64;                    # estimated floating-point operations of one launch
}

struct Binding {
  param @0 :Text;                      # the leaf's tensor parameter
  region @1 :Region;                   # the region of storage it is bound to
}

struct Launch {
  leaf @0 :Text;
  reads @1 :List(Binding);
  writes @2 :List(Binding);
}

struct Unit {
  coord @0 :List(Int64);
  index @1 :UInt64;
  launches @2 :List(Launch);
}
