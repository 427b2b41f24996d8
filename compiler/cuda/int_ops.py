"""Integer operations of the generated code whose C spelling depends on the integer type: floor
division and modulo (the language's, Python's: the quotient rounds toward -inf, the remainder
has the divisor's sign), shifts that clamp the count as PTX does, and the bit-exact passage of
integer tiles through shared memory's float words. i32's helpers are in every kernel's prelude
(codegen.PRELUDE); those of i64 and u32 are emitted only by kernels that use them
(`gen.used.int_helpers`, written out by codegen), so no other kernel's code changes."""

from __future__ import annotations

HELPERS = {
    "floordiv_l": """__device__ __forceinline__ long long floordiv_l(long long a, long long b) {
  long long q = a / b;
  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}""",
    "floormod_l": """__device__ __forceinline__ long long floormod_l(long long a, long long b) {
  long long r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}""",
    "shl_l": """__device__ __forceinline__ long long shl_l(long long a, long long n) {
  return (unsigned)n >= 64u ? 0 : (long long)((unsigned long long)a << n);
}""",
    "shr_l": """__device__ __forceinline__ long long shr_l(long long a, long long n) {
  return a >> ((unsigned)n >= 64u ? 63 : n);
}""",
    # float to i64: cvt.rzi saturates, but the GPU gives a NaN -2^63 where the language says 0
    "nan_to_i64": """__device__ __forceinline__ long long nan_to_i64(float x) {
  return x != x ? 0LL : (long long)x;
}""",
    "shl_u": """__device__ __forceinline__ unsigned shl_u(unsigned a, unsigned n) {
  return n >= 32u ? 0u : a << n;
}""",
    "shr_u": """__device__ __forceinline__ unsigned shr_u(unsigned a, unsigned n) {
  return n >= 32u ? 0u : a >> n;
}""",
    # f32 max/min have no atom instruction: a compare-and-swap loop, fmaxf's NaN rule
    "atomic_fmax": """__device__ __forceinline__ void atomic_fmax(float* at, float v) {
  int* word = reinterpret_cast<int*>(at);
  int old = *word, seen;
  do {
    seen = old;
    const float next = fmaxf(__int_as_float(seen), v);
    if (__float_as_int(next) == seen) return;
    old = atomicCAS(word, seen, __float_as_int(next));
  } while (old != seen);
}""",
    "atomic_fmin": """__device__ __forceinline__ void atomic_fmin(float* at, float v) {
  int* word = reinterpret_cast<int*>(at);
  int old = *word, seen;
  do {
    seen = old;
    const float next = fminf(__int_as_float(seen), v);
    if (__float_as_int(next) == seen) return;
    old = atomicCAS(word, seen, __float_as_int(next));
  } while (old != seen);
}""",
}

# (write, read) templates of an integer register value into / out of a float word of shared memory
SHARED_BITS = {
    "i32": ("__int_as_float({})", "__float_as_int({})"),
    "u32": ("__uint_as_float({})", "__float_as_uint({})"),
    "i64": ("{}", "{}"),  # through a long long pointer over two words (exprs.through_shared)
}


# the identity of each fold, as C of the value type: (float, i32, i64, u32)
_IDENTITIES = {
    "sum": ("0.0f", "0", "0LL", "0u"),
    "prod": ("1.0f", "1", "1LL", "1u"),
    "max": ("__int_as_float(0xff800000)", "(-2147483647 - 1)", "(-9223372036854775807LL - 1)", "0u"),
    "min": ("__int_as_float(0x7f800000)", "2147483647", "9223372036854775807LL", "4294967295u"),
}
_COLUMN = {"i32": 1, "i64": 2, "u32": 3}


def identity(fold: str, dtype: str) -> str:
    """The identity of `fold` (sum, prod, max, min) on values of `dtype` (any float: f32)."""
    return _IDENTITIES[fold][_COLUMN.get(dtype, 0)]


def value_ctype(dtype: str) -> str:
    """The C type a fold over values of `dtype` computes in (floats of every width: float)."""
    return {"i32": "int", "i64": "long long", "u32": "unsigned"}.get(dtype, "float")


def shared_words(dtype: str) -> int:
    """Float words of shared memory one element of `dtype` takes."""
    return 2 if dtype == "i64" else 1


def shared_put(dtype: str, buf: str, index: str, value: str) -> str:
    """The C statement writing `value` (of `dtype`) into element `index` of a shared buffer of
    float words, bit for bit (shared_words(dtype) words an element)."""
    if dtype == "i64":
        return f"reinterpret_cast<long long*>({buf})[{index}] = {value};"
    into = SHARED_BITS.get(dtype, ("{}", "{}"))[0]
    return f"{buf}[{index}] = {into.format(value)};"


def shared_get(dtype: str, buf: str, index: str) -> str:
    if dtype == "i64":
        return f"reinterpret_cast<long long*>({buf})[{index}]"
    out = SHARED_BITS.get(dtype, ("{}", "{}"))[1]
    return out.format(f"{buf}[{index}]")


def use(gen, name: str) -> str:
    """The name of helper `name`, which the kernel's prelude then defines."""
    gen.used.int_helpers.add(name)
    return name


def divide(gen, dtype: str, a: str, b: str) -> str:
    if dtype == "i64":
        return f"{use(gen, 'floordiv_l')}({a}, {b})"
    if dtype == "u32":
        return f"({a} / {b})"  # unsigned: floor and truncation agree
    return f"floordiv_i({a}, {b})"


def modulo(gen, dtype: str, a: str, b: str) -> str:
    if dtype == "i64":
        return f"{use(gen, 'floormod_l')}({a}, {b})"
    if dtype == "u32":
        return f"({a} % {b})"
    return f"floormod_i({a}, {b})"


def shift(gen, dtype: str, left: bool, a: str, n: str) -> str:
    suffix = {"i64": "l", "u32": "u"}.get(dtype, "i")
    name = f"{'shl' if left else 'shr'}_{suffix}"
    if suffix != "i":
        use(gen, name)
    return f"{name}({a}, {n})"


def zero(dtype: str) -> str:
    """The default fill of a load of a tensor of `dtype`, as C."""
    if dtype == "bool":
        return "false"
    return "0" if dtype in ("i32", "i64", "u32", "u8") else "0.0f"


def prelude(used: set[str]) -> list[str]:
    return [line for name in sorted(used) for line in HELPERS[name].splitlines()]


def atomic(gen, op: str, dtype: str, ptr: str, v: str) -> str:
    """The C call of atomic `op` into the element `ptr` of a tensor of `dtype` (f32, i32, i64,
    u32), `v` already of that type. An i64 add goes through the unsigned 64-bit atomicAdd (two's
    complement addition wraps alike)."""
    kind = op.removeprefix("atomic_")
    if dtype == "f32" and kind != "add":
        return f"{use(gen, 'atomic_f' + kind)}(&{ptr}, {v})"
    func = {"add": "atomicAdd", "max": "atomicMax", "min": "atomicMin"}[kind]
    if dtype == "i64" and kind == "add":
        return f"atomicAdd(reinterpret_cast<unsigned long long*>(&{ptr}), (unsigned long long)({v}))"
    return f"{func}(&{ptr}, {v})"
