"""LLM.generate over the byte tokenizer: text in, text out, same tokens as the Worker."""

import pytest

from specworker.llm import LLM
from specworker.sampling_params import SamplingParams
from specworker.tokenizer import ByteTokenizer
from specworker.worker.request import FinishReason
from specworker.worker.worker import Worker
from tests.worker.worker_harness import drive, make_config, Req


def test_llm_generate_matches_worker_tokens():
    config = make_config()
    prompts = ["def add(a, b):", "The quick brown fox", "é"]
    params = SamplingParams(max_tokens=12, temperature=0.0)
    outs = LLM(config).generate(prompts, params)
    tok = ByteTokenizer()
    want = drive(Worker(config), [Req(f"r{i}", tok.encode(p), params) for i, p in enumerate(prompts)])
    assert [o.prompt for o in outs] == prompts
    for i, o in enumerate(outs):
        assert o.token_ids == want[f"r{i}"][0]
        assert o.text == tok.decode(o.token_ids) and isinstance(o.text, str)
        assert o.finish_reason in (FinishReason.LENGTH, FinishReason.STOP)


def test_llm_generate_per_prompt_params_and_bad_arguments():
    llm = LLM(make_config())
    outs = llm.generate(["a", "b"], [SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True),
                                     SamplingParams(max_tokens=5, temperature=0.0, ignore_eos=True)])
    assert [len(o.token_ids) for o in outs] == [2, 5]
    again = llm.generate(["a"], SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True))
    assert again[0].token_ids == outs[0].token_ids  # a second call reuses the worker cleanly
    with pytest.raises(TypeError, match="prompts is a str"):
        llm.generate("abc", SamplingParams())
    with pytest.raises(ValueError, match="2 sampling_params for 1 prompts"):
        llm.generate(["a"], [SamplingParams(), SamplingParams()])


def test_llm_generate_is_all_or_nothing():
    """A bad prompt anywhere in the list queues none of them (nothing is computed in the next call)."""
    llm = LLM(make_config())
    with pytest.raises(TypeError, match=r"prompts\[1\] is a int"):
        llm.generate(["ok", 5], SamplingParams(max_tokens=2))
    with pytest.raises(ValueError):
        llm.generate(["ok", "x" * 200], SamplingParams(max_tokens=2))  # longer than max_model_len 96
    assert not llm.worker.has_unfinished()
    assert len(llm.generate(["ok"], SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True))[0].token_ids) == 3


def test_llm_chat_needs_a_template_and_valid_messages():
    llm = LLM(make_config())
    with pytest.raises(ValueError, match="no chat template"):
        llm.chat([[{"role": "user", "content": "hi"}]], SamplingParams(max_tokens=2))
    with pytest.raises(ValueError, match=r"conversations\[0\]: messages\[0\].role = 'robot'"):
        llm.chat([[{"role": "robot", "content": "hi"}]], SamplingParams(max_tokens=2))
    with pytest.raises(TypeError, match=r"conversations\[1\]: messages\[0\].content is a int"):
        llm.chat([[{"role": "user", "content": "a"}], [{"role": "user", "content": 3}]], SamplingParams())


def test_llm_chat_on_smollm2_uses_the_chat_template():
    from specworker.config import config_from_dict
    from tests.smollm2 import require_smollm2

    config = config_from_dict({"model": {"path": str(require_smollm2())},
                               "scheduler": {"max_num_seqs": 2, "max_model_len": 128, "num_blocks": 16}})
    llm = LLM(config)
    params = SamplingParams(max_tokens=8, temperature=0.0)
    out = llm.chat([[{"role": "user", "content": "What is the capital of France?"}]], params)[0]
    assert out.prompt.startswith("<|im_start|>") and out.prompt.endswith("<|im_start|>assistant\n")
    plain = llm.generate([out.prompt], params)[0]  # the rendered text, encoded with its special tokens as ids
    assert out.token_ids != plain.token_ids or out.text == plain.text
    assert "Paris" in out.text, out.text
