#!/usr/bin/env python3
"""scripts/golden/gguf_with_keys.py: a copy of a ../shared GGUF with metadata keys added or
replaced, as a tests/data/golden/<name>/derive.json describes ({"from": path under ../shared,
"string"|"f32"|"u32": {key: value}}), for llama.cpp to make that golden from
(scripts/golden/make_goldens.sh). tests/models/test_repo_goldens.cpp builds the same file with
Sluice's GGUF writer instead of storing it.

Usage: gguf_with_keys.py DERIVE.json OUT.gguf
"""
import json
import os
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from derive_hybrid_models import field_value  # noqa: E402


def main():
    spec = json.load(open(sys.argv[1]))
    shared = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared")
    r = GGUFReader(os.path.join(shared, spec["from"]))
    arch = bytes(r.fields["general.architecture"].parts[r.fields["general.architecture"].data[0]]).decode()
    types = {"string": GGUFValueType.STRING, "f32": GGUFValueType.FLOAT32, "u32": GGUFValueType.UINT32}
    extra = {k: (v, types[t]) for t in types for k, v in spec.get(t, {}).items()}
    w = GGUFWriter(sys.argv[2], arch)
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture" or key in extra:
            continue
        val, t, sub = field_value(f)
        w.add_key_value(key, val, t, sub_type=sub)
    for key, (val, t) in extra.items():
        w.add_key_value(key, val, t)
    for t in r.tensors:
        w.add_tensor(t.name, np.array(t.data))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
