"""A copy of the tiny Qwen3-VL fixture in the layout of the model folders on the Hugging Face hub.

transformers 5 saves `rope_parameters` and one `processor_config.json`; the released Qwen3-VL folders (and
transformers 4.57, which RLinf 0.3.0 requires) use `rope_scaling` + `rope_theta` in the text config and
separate `preprocessor_config.json` / `video_preprocessor_config.json` files, and a tokenizer config with
`additional_special_tokens`. Both transformers read this layout,
so the project and RLinf load the very same folder.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path


def hub_layout_copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    config = json.loads((target / "config.json").read_text())
    text = config["text_config"]
    rope = dict(text.get("rope_parameters") or {})
    text["rope_theta"] = rope.pop("rope_theta", 10000.0)
    text["rope_scaling"] = rope
    (target / "config.json").write_text(json.dumps(config, indent=2))
    processor = json.loads((target / "processor_config.json").read_text())
    (target / "preprocessor_config.json").write_text(
        json.dumps({**processor["image_processor"], "processor_class": "Qwen3VLProcessor"}, indent=2)
    )
    (target / "video_preprocessor_config.json").write_text(
        json.dumps({**processor["video_processor"], "processor_class": "Qwen3VLProcessor"}, indent=2)
    )
    (target / "processor_config.json").unlink()
    tokenizer = json.loads((target / "tokenizer_config.json").read_text())
    tokenizer.pop("backend", None)
    tokenizer["additional_special_tokens"] = tokenizer.pop("extra_special_tokens", [])
    tokenizer["tokenizer_class"] = "PreTrainedTokenizerFast"
    (target / "tokenizer_config.json").write_text(json.dumps(tokenizer, indent=2))
    return target
