"""A small real GGUF file made from the embedded model, for tests of the conversion machinery that need a file
transformers' GGUF reader takes but not a whole model's worth of de-quantising."""

from __future__ import annotations


def write_f16_gguf(source, target, layers: int = 2) -> None:
    """A real F16 GGUF: the source's first ``layers`` blocks, its matrices dequantised and stored as F16 (norms stay
    F32), with all its metadata (tokenizer included) copied but the file type, which says F16."""
    from gguf import GGUFReader, GGUFValueType, GGUFWriter
    from gguf.quants import dequantize

    reader = GGUFReader(str(source))
    arch = reader.fields["general.architecture"].contents()
    writer = GGUFWriter(str(target), arch=arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = layers if key == f"{arch}.block_count" else field.contents()
        if key == "general.file_type":
            value = 1  # LLAMA_FTYPE_MOSTLY_F16
        sub = field.types[-1] if field.types[0] == GGUFValueType.ARRAY else None
        writer.add_key_value(key, value, field.types[0], sub_type=sub)
    for t in reader.tensors:
        if t.name.startswith("blk.") and int(t.name.split(".")[1]) >= layers:
            continue
        values = dequantize(t.data, t.tensor_type).reshape([int(n) for n in reversed(t.shape)])
        writer.add_tensor(t.name, values.astype("float16") if values.ndim >= 2 else values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
