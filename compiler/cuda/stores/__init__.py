"""How a leaf writes its outputs: emit.py (a Store statement as C code), values.py (which values a
store writes straight from the accumulator's registers), epilogue.py (the epilogue stage: element-wise
lets inlined into the store that reads them)."""
