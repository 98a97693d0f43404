"""bench_generate.py -- a Hugging Face Transformers generation loop on the CPU with attention by
flashc, torch's SDPA and eager: time per generated token after a long prompt.

A random-weight Llama-architecture model (nothing downloaded; GQA 16/4, head_dim 128, fp32), a
PROMPT-token prompt through the model once (prefill, KV cache filled), then NEW tokens one at a time
with the cache (decode steps; greedy). flashc runs twice: as built, and with
FLASHC_CPU_DECODE_MAX_SQ=-1 (every forward on the FA2 tiles, the CPU rule before session 32), each in
its own process since the library reads it when a context is made.

  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE PYTHONPATH=python python3 python/tools/bench_generate.py
"""
import json
import os
import subprocess
import sys
import time

PROMPT, NEW, LAYERS = 2048, 32, 4


def child(impl):
    import torch
    import transformers

    import flashc.transformers

    flashc.transformers.register()
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=1024, hidden_size=2048, intermediate_size=2048, num_hidden_layers=LAYERS,
                                   num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=PROMPT + NEW)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=impl).eval()
    ids = torch.randint(0, 1024, (1, PROMPT))
    with torch.no_grad():
        t0 = time.perf_counter()
        out = model(ids, use_cache=True)
        prefill = time.perf_counter() - t0
        cache, tok, steps = out.past_key_values, out.logits[:, -1:].argmax(-1), []
        for _ in range(NEW):
            t0 = time.perf_counter()
            out = model(tok, past_key_values=cache, use_cache=True)
            steps.append(time.perf_counter() - t0)
            cache, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
    steps.sort()
    print(json.dumps({"prefill": prefill, "step": steps[len(steps) // 2]}))


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        return child(sys.argv[2])
    runs = [("eager", "eager", None), ("sdpa", "sdpa", None), ("flashc", "flashc", None),
            ("flashc, FA2 tiles only", "flashc", "-1")]
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, torch threads default; "
          f"Llama {LAYERS} layers, hidden 2048, GQA 16/4, head_dim 128, fp32; prompt {PROMPT}, {NEW} new tokens")
    print(f"{'attention':24s} {'prefill s':>10s} {'ms / token (median)':>20s}")
    for name, impl, max_sq in runs:
        env = dict(os.environ)
        if max_sq is not None:
            env["FLASHC_CPU_DECODE_MAX_SQ"] = max_sq
        r = subprocess.run([sys.executable, __file__, "--child", impl], env=env, capture_output=True, text=True)
        if r.returncode:
            print(f"{name:24s} failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
            continue
        res = json.loads(r.stdout.strip().splitlines()[-1])
        print(f"{name:24s} {res['prefill']:10.2f} {res['step'] * 1e3:20.1f}", flush=True)


if __name__ == "__main__":
    main()
