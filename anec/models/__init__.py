"""Model frontends: Hugging Face checkpoints (GPT-2, Llama, BERT) as anec programs.

* :mod:`anec.models.hf` reads checkpoint directories and tokenizers (offline only);
* :mod:`anec.models.common` holds layout helpers, IR building blocks, buckets,
  the program cache and the progress bar;
* :mod:`anec.models.decoder`, :mod:`~anec.models.gpt2`, :mod:`~anec.models.llama`
  and :mod:`~anec.models.bert` generate the IR of each architecture;
* :mod:`anec.models.generate` runs prefill, KV-cache decode and sampling;
* :mod:`anec.models.lora` turns projections into base + LoRA with the adapter as inputs;
* :mod:`anec.models.export` writes a checkpoint's programs as ``.ir`` files.

Modules are imported on use; importing ``anec.models`` loads nothing heavy.
"""
