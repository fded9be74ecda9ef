"""Make the tiny Qwen3.5 MoE hybrid checkpoint the real engines serve; never downloaded.

Run with the CPU engine venv's python (transformers, tokenizers, torch):
    python tests/realengine/checkpoint.py OUT_DIR

The architecture is Qwen3.5's (``Qwen3_5MoeForConditionalGeneration``, the class qdd renders
for the 397B, served ``--language-model-only``), shrunk: 4 layers, full attention every 4th
(layer 3; layers 0–2 Gated DeltaNet), GDN key/value head dim 128 (the only one the CPU GDN kernel
takes: docs/facts/cpu-engines.md), 4 experts top-2 plus a shared expert, hidden 128, vocab 512,
a one-block vision tower that ``--language-model-only`` never loads. Weights: transformers'
own initialisation (``from_config``) under a fixed seed with ``initializer_range`` 0.5 — the
default 0.02 makes every logit nearly equal and greedy output degenerate (one token repeated) —
stored as bf16 safetensors (the CPU GDN kernel runs bf16 only). The tokenizer is a byte-level BPE
trained by the ``tokenizers`` library on :data:`CORPUS`. ``preprocessor_config.json``: vLLM's
decode role builds the multimodal processor of this class even with --language-model-only and
dies without one ("Can't load image processor").
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SEED = 1234
VOCAB = 512
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
            "<|image_pad|>", "<|video_pad|>"]
TEXT_CONFIG = dict(
    vocab_size=VOCAB, hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
    head_dim=64, linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=128,
    linear_value_head_dim=128, linear_conv_kernel_dim=4, num_experts=4, num_experts_per_tok=2,
    moe_intermediate_size=64, shared_expert_intermediate_size=64, max_position_embeddings=4096,
    initializer_range=0.5, layer_types=["linear_attention"] * 3 + ["full_attention"],
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                     "mrope_section": [2, 3, 3], "mrope_interleaved": True},
    bos_token_id=None, eos_token_id=0, pad_token_id=0, tie_word_embeddings=False,
)
VISION_CONFIG = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=128,
                     patch_size=16, spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=64)
CORPUS = [
    "The prefill engine computes the key value cache and the decode engine reads it over the network.",
    "Gated delta networks keep a recurrent state; full attention layers keep keys and values per token.",
    "A router sends each request to a prefill engine first and then to a decode engine with the block ids.",
    "Kubernetes schedules pods onto nodes; an operator turns one resource into many objects.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 32 64 128 256 512 1024 2048 4096 8192.",
    "the quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat in the sun.",
]


def make_tokenizer(out: Path) -> dict[str, int]:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    assert tok.get_vocab_size() <= VOCAB, tok.get_vocab_size()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.save_pretrained(str(out))
    return {s: tok.token_to_id(s) for s in SPECIALS}


def make(out: Path) -> Path:
    import torch
    from transformers import Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration

    out.mkdir(parents=True, exist_ok=True)
    ids = make_tokenizer(out)
    config = Qwen3_5MoeConfig(
        text_config=TEXT_CONFIG, vision_config=VISION_CONFIG, image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"], vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"], tie_word_embeddings=False,
    )
    config.architectures = ["Qwen3_5MoeForConditionalGeneration"]
    torch.manual_seed(SEED)
    model = Qwen3_5MoeForConditionalGeneration(config)
    model = model.to(torch.bfloat16)
    config.dtype = torch.bfloat16
    model.save_pretrained(str(out), safe_serialization=True)
    (out / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "Qwen2VLImageProcessor", "patch_size": 16, "temporal_patch_size": 2,
        "merge_size": 2, "min_pixels": 3136, "max_pixels": 12845056,
        "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}, indent=1))
    return out


if __name__ == "__main__":
    print(make(Path(sys.argv[1])))
