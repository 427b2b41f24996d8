@0xb3ad81906287ba64;
# The RPC interfaces between the scheduler (phobos-sched) and the pods (phobos-pod), and between
# pods (peer tile fetches). Kept stable once committed: add fields at
# the end of a struct with a new ordinal, never renumber.
#
# Conventions
# - Every connection is opened on the bootstrap interface `Gate`; nothing else is reachable until
#   `login` is called with the cluster's token (the scheduler and every peer present the same one).
# - `jobId` is the scheduler's name for a job (Text); `generation` is the plan generation
#   (starts at 1, raised by every re-plan). The plans of a job's generations run side by side on a
#   pod (a re-plan does not replace the plans before it); a pod refuses `submit`, `tileHeader`,
#   `readChunk`, `release` and `ipcHandle` for a job it cancelled. Instruction ids of one job's
#   plans do not overlap.
# - Buffers are numbered per node and per generation (schemas/instructions.py); within one plan a
#   buffer number names one buffer only (not reused after its Free), so a peer's (generation,
#   buffer) is unambiguous. Instruction ids are unique within a plan and deps name ids of the same
#   plan; a pod refuses a plan that breaks this (or has a dependency cycle) with the reason.
#   Tiles move as f32 C-order bytes, whatever the storage dtype.
# - Times are seconds since the Unix epoch (time.time() on the pod), so the scheduler subtracts
#   its own job start; pods on other hosts are assumed to keep their clocks in sync (NTP).
# - Message limits: every connection is read with an explicit traversal limit (see
#   schemas/capnp_io.py TRAVERSAL_LIMIT_WORDS: 64 MiB) and nesting limit (64). That is why tiles
#   travel in chunks (`readChunk`, 4 MiB by default), never as one message.
# - Errors: a refused call answers with `failure` (a FailureKind and a one-line message, e.g.
#   staleGeneration "generation 1 is older than 2"); callers decide by the kind, report the
#   message, and nothing retries silently forever. A call fails with an exception only when the
#   connection itself does (Cap'n Proto's DISCONNECTED) or the message breaks the limits.

# ---- Plain data -----------------------------------------------------------------------------

# Regions, tensor infos and leaves are the program schema's (program.capnp).
using P = import "program.capnp";

struct Scalar {
  # A runtime scalar of the job; floats and ints keep their kind.
  name @0 :Text;
  union {
    float @1 :Float64;
    int @2 :Int64;
  }
}

struct LeafCode {
  # A leaf as a pod runs it.
  leaf @0 :P.Leaf;
  ptx @1 :Text;            # unused since `compiled` (kept: fields are never renumbered)
  writes @2 :List(Text);   # tensor parameters the leaf stores to (a buffer bound to one of them
                           # is servable to peers only after that compute); empty = the pod works
                           # it out from the source
  compiled @3 :P.CompiledLeaf;  # optional: the leaf compiled once by the scheduler for this pod's
                                # GPU (leaf "" = none: the pod compiles); it replaces `ptx`
}

struct Program {
  # What a pod needs of the cluster program to run its plan.
  kernel @0 :Text;
  leaves @1 :List(LeafCode);
  scalars @2 :List(Scalar);
  tensors @3 :List(P.TensorInfo);
}

struct Instruction {
  # schemas/instructions.py, one variant per kind. `deps` are ids of instructions on the same
  # node (same generation) that must complete first.
  id @0 :UInt32;
  deps @1 :List(UInt32);
  union {
    allocate @2 :Allocate;
    load @3 :Load;
    fetch @4 :Fetch;
    compute @5 :Compute;
    store @6 :Store;
    free @7 :Free;
  }

  struct Allocate {
    buffer @0 :UInt32;
    shape @1 :List(Int64);
    dtype @2 :Text;          # the tensor's storage dtype: f32, f16, bf16, i32 ("" reads as f32)
  }
  struct Load {
    buffer @0 :UInt32;
    unusedUri @1 :Text;      # before `tensor`: the URI itself; never written now
    region @2 :P.Region;
    tensor @3 :UInt32;       # an index into the plan's `uris`
  }
  struct Fetch {
    buffer @0 :UInt32;
    peer @1 :UInt32;
    peerBuffer @2 :UInt32;
  }
  struct Compute {
    leaf @0 :Text;
    bindings @1 :List(Binding);
    unit @2 :UInt32;
    struct Binding {
      param @0 :Text;
      buffer @1 :UInt32;
    }
  }
  struct Store {
    buffer @0 :UInt32;
    unusedUri @1 :Text;      # before `tensor`: the URI itself; never written now
    region @2 :P.Region;
    unit @3 :UInt32;
    tensor @4 :UInt32;       # an index into the plan's `uris` (the ORIGINAL tensor's URI; the
                             # pod writes the job's staging copy)
  }
  struct Free {
    buffer @0 :UInt32;
    serves @1 :UInt32;     # peer fetches to wait for before freeing (= the length of `peers`)
    peers @2 :List(UInt32); # the nodes that fetch it, each once; a node missing from a later
                            # submit's `peers` is lost to the job and no longer waited for
  }
}

struct Plan {
  # schemas/instructions.py NodePlan.
  node @0 :UInt32;
  generation @1 :UInt32;
  instructions @2 :List(Instruction);
  peakBytes @3 :UInt64;
  uris @4 :List(Text);     # each tensor's storage URI, stated once; Load and Store name an index
}

struct Peer {
  node @0 :UInt32;
  address @1 :Text;        # "host:port" of the peer's Gate
}

struct PodInfo {
  backend @0 :Text;        # "cpu" or "gpu"
  deviceName @1 :Text;
  vramBytes @2 :UInt64;    # memory the pod may fill with buffers (host RAM for a CPU pod)
  pid @3 :UInt32;
  hostId @4 :Text;         # equal on pods of one host (same-host GPU peers may use CUDA IPC)
  deviceIndex @5 :Int32;   # CUDA device ordinal, -1 for a CPU pod
  # The GPU's compute capability, major * 10 + minor (80 for an A100, 90 for an H200): the
  # scheduler compiles the job's leaves for it (compiler/cuda/target.py). 0 for a CPU pod, and
  # what a pod older than this field reads as (its leaves are then compiled for 9.0, as before).
  computeCapability @6 :UInt32;
}

struct TileHeader {
  shape @0 :List(Int64);
  dtype @1 :Text;          # always "f32" on the wire today
  nbytes @2 :UInt64;
  checksum @3 :UInt32;     # CRC-32C of the tile's nbytes bytes (C order; pod/rpc/transfer.py crc32c_of)
  # Bulk path (0 / empty: none; use readChunk): connect to TCP `dataPort` on the peer's host,
  # send the 16-byte `ticket`, read exactly `nbytes` bytes. A ticket is good for one transfer
  # and only a short while; it is handed out only over this authenticated RPC. Python's asyncio
  # streams (and so pycapnp's transport) top out far below the link's speed, hence this path.
  dataPort @4 :UInt16;
  ticket @5 :Data;
}

struct InstructionEvent {
  # One finished instruction (or one tile served to a peer: kind "serve", id = the buffer).
  id @0 :UInt32;
  kind @1 :Text;           # allocate, load, fetch, compute, store, free, serve
  start @2 :Float64;       # Unix seconds
  end @3 :Float64;
  bytes @4 :UInt64;        # bytes moved: loaded, fetched, served, stored (0 for compute)
  peer @5 :Int32;          # fetch: the node fetched from; serve: the node served; -1 otherwise
  ok @6 :Bool;
  message @7 :Text;        # failure reason when not ok
  unit @8 :Int32;          # compute/store: the unit of work; -1 otherwise
  leaf @9 :Text;           # compute: the leaf's name; "" otherwise
  copySeconds @10 :Float64; # load/store: seconds of it spent copying host<->device (scheduler/tracing/phases.py)
}

enum FailureKind {
  # Why a call was refused (schemas/remote_errors.py FailureKind mirrors it).
  none @0;             # not refused
  refused @1;          # a bad request: unknown buffer, URI outside the roots, chunk too long
  badPlan @2;          # the plan breaks the schema's invariants or names an unknown leaf
  staleGeneration @3;  # the job moved on (older generation, dropped, cancelled)
  notReady @4;         # the tile is not filled yet; the owner is alive, ask again
  declaredDead @5;     # the scheduler has declared this pod dead and re-planned its work
  internal @6;         # the callee failed in a way the caller cannot fix (a bug, a broken device)
}

struct Failure {
  kind @0 :FailureKind;
  message @1 :Text;    # one line, no traceback
}

# ---- Interfaces -------------------------------------------------------------------------------

enum LoginRefusal {
  # Why a login handed over nothing. The pod answers a refusal as data, never as an exception
  # (an exception would carry the pod's Python traceback to a stranger), after a delay that
  # throttles guessing, and then closes the connection: one attempt per connection.
  none @0;          # logged in: `pod` is set
  missingToken @1;
  wrongToken @2;
}

interface Gate {
  # The bootstrap capability of every pod. A wrong or missing token hands over nothing and
  # names the refusal.
  login @0 (token :Text) -> (pod :Pod, refusal :LoginRefusal);
}

interface Pod {
  # The scheduler's connection. `hello` makes the caller this pod's scheduler: the pod
  # heartbeats to `scheduler` and exits when that connection drops or heartbeats keep failing.
  # `node` is this pod's node number in the cluster.
  hello @0 (scheduler :SchedulerSink, node :UInt32) -> (info :PodInfo);

  # Run `plan` (this node's share), beside the job's plans of other generations. `peers` are the
  # job's live nodes: a node named by an earlier submit and missing now is lost for good, and the
  # pod's plans stop waiting for it (a Free no longer waits for its fetch; a fetch from it not yet
  # done is dropped with what depends on it, reported as a failed fetch event).
  # A plan too big for one message (64 MiB: some 600,000 instructions) travels in parts, in order:
  # every part but the last says `more`; the pod joins their instructions, takes `program` from the
  # first part and `peers` from the last, and starts nothing before the last part
  # (schemas/capnp_io.py send_submit does this).
  # `staged` false: the job's outputs have no staging copies yet (the scheduler creates them
  # beside the plan's first loads). The plan starts at once, but none of the job's stores writes
  # before `outputsStaged` names the job (or a later submit of it says `staged`): a store writes
  # through a memory map into a copy whose space must be reserved first.
  submit @1 (jobId :Text, generation :UInt32, program :Program, plan :Plan, peers :List(Peer),
             more :Bool = false, staged :Bool = true) -> (failure :Failure);

  # Peer fetches. `tileHeader` waits until the buffer's producers are done (bounded by the
  # caller's patience), then describes it. `readChunk` returns bytes [offset, offset+length) of
  # the tile (length <= 16 MiB). `release` tells the owner one fetch of the buffer is complete,
  # which is what a Free with `serves` > 0 waits for; `gaveUp` true: the caller will not fetch
  # it (its fetch failed or was dropped), so that Free waits for it no longer. A give-up may come
  # before the owner has the plan of that generation (the fetch failed meanwhile): it is kept
  # for the plan.
  tileHeader @2 (jobId :Text, generation :UInt32, buffer :UInt32)
      -> (header :TileHeader, failure :Failure);
  readChunk @3 (jobId :Text, generation :UInt32, buffer :UInt32, offset :UInt64, length :UInt32)
      -> (data :Data, failure :Failure);
  release @4 (jobId :Text, generation :UInt32, buffer :UInt32, node :UInt32, bytes :UInt64,
              gaveUp :Bool = false) -> (failure :Failure);

  # Same-host GPU peers: a CUDA IPC memory handle of the buffer (cupy runtime.ipcGetMemHandle)
  # and its header. Fails on a CPU pod; the caller then falls back to readChunk.
  ipcHandle @5 (jobId :Text, generation :UInt32, buffer :UInt32)
      -> (handle :Data, header :TileHeader, deviceIndex :Int32, hostId :Text, failure :Failure);

  # @6 was newGeneration (drop the job's older plans): never called; a re-plan's plans run beside
  # the older ones. Ordinals cannot skip, so it stays as a method no pod implements
  # (a caller gets UNIMPLEMENTED) and the later ordinals keep their numbers.
  retired6 @6 () -> ();

  # Drop the job entirely (buffers freed, nothing more reported).
  cancel @7 (jobId :Text) -> ();

  # Exit the pod process after replying.
  shutdown @8 () -> ();

  # This pod's description (peers use it to decide on CUDA IPC).
  info @9 () -> (info :PodInfo);

  # Same-host GPU peers, from the owner: buffer `buffer` of node `node`'s plan `generation` is
  # complete; here are its CUDA IPC handle and header. The owner sends it, once, to every peer
  # its plan names as fetching the buffer (the buffer's Free lists them), as soon as the buffer
  # is servable; the owner keeps the allocation untouched until that peer releases it (or the
  # job ends). A fetch of an offered buffer is then a local device copy with no round trip; a
  # fetch that finds no offer asks `ipcHandle` as before. A CPU owner sends the same to every
  # such peer with an empty `handle` and a header carrying the tile's CRC-32C and a data-port
  # ticket for that peer: its fetch is then the bulk transfer alone (no `tileHeader`).
  tileReady @10 (jobId :Text, generation :UInt32, node :UInt32, buffer :UInt32, handle :Data,
                 header :TileHeader, deviceIndex :Int32) -> (failure :Failure);

  # The job's outputs have their staging copies, their space reserved: its stores held for them
  # (a submit said `staged` false) write now, and so do its later ones. A job the pod has no plan
  # of yet is remembered (the word may overtake the submit it follows).
  outputsStaged @11 (jobId :Text) -> (failure :Failure);
}

interface SchedulerSink {
  # `running`: ids of the instructions running now, of every generation; `generation` the newest.
  # `failure` declaredDead: this pod's work was re-planned; it must drop everything and go.
  heartbeat @0 (node :UInt32, generation :UInt32, running :List(UInt32)) -> (failure :Failure);

  # Finished instructions, batched (a pod sends at most one batch in flight at a time).
  # `jobId` names the job the events belong to.
  events @1 (node :UInt32, generation :UInt32, events :List(InstructionEvent), jobId :Text) -> ();

  # The plan of (jobId, generation) ran to the end on this node (every instruction done, every
  # buffer freed) or stopped at its first failed instruction (`ok` false, the reason in `message`).
  finished @2 (node :UInt32, jobId :Text, generation :UInt32, ok :Bool, message :Text) -> ();
}
