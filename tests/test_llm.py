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
