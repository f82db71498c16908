"""Reading Horizon token shards (data/shard.h) from Python, and the King James Bible's documents
exactly as Horizon splits them (the byte tokenizer's ids are the text's bytes).

    from hz_shards import read_shard, bible_split
    train_docs, val_docs = bible_split("build/horizon", seed=1234, val_fraction=0.05)
"""
import json
import os
import struct
import subprocess
import tempfile


def read_shard(path):
    """The documents of a HZSHARD1 file as lists of ids (checks magic, version, size and checksum)."""
    data = open(path, "rb").read()
    assert data[:8] == b"HZSHARD1", f"{path} is not a Horizon shard"
    version, bpt, n_tokens, n_docs, checksum = struct.unpack_from("<IIQQQ", data, 8)
    assert version == 1 and bpt in (2, 4), f"{path}: version {version}, bytes per token {bpt}"
    assert len(data) == 40 + 8 * (n_docs + 1) + bpt * n_tokens, f"{path}: size does not match the header"
    h = 0xCBF29CE484222325
    for b in data[40:]:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    assert h == checksum, f"{path}: checksum mismatch"
    offsets = struct.unpack_from(f"<{n_docs + 1}Q", data, 40)
    tokens = struct.unpack_from(f"<{n_tokens}{'H' if bpt == 2 else 'I'}", data, 40 + 8 * (n_docs + 1))
    return [list(tokens[offsets[d]:offsets[d + 1]]) for d in range(n_docs)]


def bible_split(horizon, seed=1234, val_fraction=0.05):
    """(train, val): the Bible's books as Horizon's loader splits them for this seed and
    val_fraction, as (name, text) pairs, obtained from `horizon data prepare` with the byte
    tokenizer (so the split is Horizon's own, not a re-implementation)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([horizon, "data", "prepare", os.path.join(root, "recipes", "quickstart.yaml"),
                        f"data.cache_dir={tmp}", f"run.seed={seed}", f"data.val_fraction={val_fraction}",
                        "data.source=bible", "data.tokenizer=byte"], check=True, stdout=subprocess.DEVNULL)
        meta = json.load(open(os.path.join(tmp, "meta.json")))
        out = []
        for split in ("train", "val"):
            docs = read_shard(os.path.join(tmp, f"{split}.shard"))
            names = meta[split]["documents"]
            out.append([(n, bytes(d).decode("utf-8")) for n, d in zip(names, docs)])
        return out[0], out[1]
