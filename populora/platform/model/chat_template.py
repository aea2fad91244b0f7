"""Where a chat turn ends, read from the tokenizer's chat template: the stop tokens of every backend (torch,
Ray, vLLM) and of evaluation's truncation check. Tokenizer only, no torch, so evaluation imports it cheaply."""

from __future__ import annotations


# End-of-turn tokens of common chat templates, looked for when rendering the template cannot tell (a template
# that drops an assistant message's content, say): ChatML (Qwen, SmolLM2), Llama 3, Gemma, Phi-3.
KNOWN_END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>")
_MARK = "\u2063POPULORA_END_OF_TURN\u2063"


def stop_token_ids(tokenizer) -> list[int]:
    """The token ids that end a completion: EOS, and the chat template's end-of-turn token if it has one.

    Qwen2.5 *base* has ``eos_token`` ``<|endoftext|>`` (151643), but its chat template closes each turn with
    ``<|im_end|>`` (151645): stopping on EOS alone lets a completion run on into an invented next turn (whose
    ``\\boxed`` the grader would take). The end-of-turn token is read from the template itself: render one
    assistant turn and take the special token right after its content.
    """
    ids = [] if tokenizer.eos_token_id is None else [int(tokenizer.eos_token_id)]
    eot = end_of_turn_id(tokenizer)
    if eot is not None and eot not in ids:
        ids.append(eot)
    return ids


def end_of_turn_id(tokenizer) -> int | None:
    """The special token the chat template writes after an assistant turn's content (None: no template, or none)."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    special = set(getattr(tokenizer, "all_special_ids", [])) | set(getattr(tokenizer, "added_tokens_decoder", {}))
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}, {"role": "assistant", "content": _MARK}],
                                             tokenize=False)
    except Exception:  # a template that refuses this exchange: fall back to the known names below
        text = ""
    if _MARK in text:
        after = tokenizer(text.split(_MARK, 1)[1], add_special_tokens=False).input_ids
        if after and after[0] in special:
            return int(after[0])
    for name in KNOWN_END_OF_TURN:  # the template names it, even if rendering did not show where
        tid = tokenizer.convert_tokens_to_ids(name)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id and name in tokenizer.chat_template:
            return tid
    return None
