"""A tiny random-weight Qwen3-VL (model, tokenizer, processor) built in code and saved to a folder.

It loads through the same `from_pretrained(folder)` path as a downloaded Qwen3-VL-4B-Instruct, so tests,
benchmarks and demos exercise the real code path without any download: a BPE tokenizer trained here on a
few sentences plus Qwen's special tokens and the three labels as single tokens, a 2-layer text model
(hidden 64, head_dim 16) and a depth-2 vision tower (hidden 32, patch 16, merge 2), about 216k parameters.
Pitfalls a tiny config meets, each of which runs silently wrong or fails with a misleading message:
`mrope_section` must fit head_dim ([4, 2, 2] for 16), the vision `out_hidden_size` must equal the text
hidden size, and `deepstack_visual_indexes` must name layers the tiny vision tower has.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .labels import LABELS

SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)

# Same message layout as Qwen's own template: images as <|vision_start|><|image_pad|><|vision_end|>.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_CORPUS = (
    "Task: Pick up the red cube and lift it.",
    "You see two synchronized videos of 5 frames each, one from the main camera and one from a second view.",
    "Judge whether the robot made progress on the task during these frames.",
    "Answer with exactly one word: positive, negative or unclear.",
    '{"trend": "positive"} the robot moved the gripper toward the object; push open drawer stack place',
    "0 1 2 3 4 5 6 7 8 9 . , : ; ! ? ( ) [ ] { } \" ' - _ / \n",
)


def build_tokenizer(vocab_size: int = 400):
    """A byte-level BPE tokenizer with the Qwen special tokens and each label as one token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(list(_CORPUS) * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        additional_special_tokens=list(SPECIAL_TOKENS[1:]),
    )
    fast.add_tokens(list(LABELS))
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_processor(tokenizer, *, patch_size: int = 16, merge_size: int = 2):
    from transformers import Qwen3VLProcessor
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    factor = patch_size * merge_size
    size = {"shortest_edge": factor * factor, "longest_edge": 4 * factor * factor}
    common: dict[str, Any] = dict(
        patch_size=patch_size,
        merge_size=merge_size,
        temporal_patch_size=2,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )
    image_processor = Qwen2VLImageProcessor(size=size, **common)
    video_processor = Qwen3VLVideoProcessor(
        size={"shortest_edge": factor * factor, "longest_edge": 64 * factor * factor}, **common
    )
    return Qwen3VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=CHAT_TEMPLATE,
    )


def build_config(tokenizer):
    from transformers import Qwen3VLConfig

    ids = tokenizer.convert_tokens_to_ids
    text_hidden = 64
    return Qwen3VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer),
            hidden_size=text_hidden,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            max_position_embeddings=4096,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": [4, 2, 2],
                "mrope_interleaved": True,
            },
            pad_token_id=ids("<|endoftext|>"),
        ),
        vision_config=dict(
            depth=2,
            hidden_size=32,
            intermediate_size=64,
            num_heads=2,
            patch_size=16,
            spatial_merge_size=2,
            temporal_patch_size=2,
            out_hidden_size=text_hidden,
            num_position_embeddings=256,
            deepstack_visual_indexes=[0],
        ),
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=False,
    )


def build_tiny_qwen3_vl(folder: str | Path, *, seed: int = 0) -> Path:
    """Build the tiny model, tokenizer and processor and `save_pretrained` them all into `folder`."""
    import torch
    from transformers import GenerationConfig, Qwen3VLForConditionalGeneration

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    processor = build_processor(tokenizer)
    config = build_config(tokenizer)
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        do_sample=False,
    )
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def main(argv: list[str] | None = None) -> None:
    """`python -m training.vlm.fixture <folder>`: write the tiny model there (for demos and benchmarks)."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("folder", help="where to save the model, tokenizer and processor")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(build_tiny_qwen3_vl(args.folder, seed=args.seed))


if __name__ == "__main__":
    main()
