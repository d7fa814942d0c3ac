"""Model frontends: Hugging Face checkpoints (GPT-2, Llama, BERT) as anec programs.

* :mod:`anec.models.hf` reads checkpoint directories and tokenizers (offline only);
* :mod:`anec.models.layout` (the BC1S activation layout), :mod:`~anec.models.buckets`
  (static sequence buckets), :mod:`~anec.models.blocks` (IR building blocks),
  :mod:`~anec.models.programs` (the program cache), :mod:`~anec.models.progress`
  and :mod:`~anec.models.common` (``ModelError``) are what the frontends share;
* :mod:`anec.models.decoder`, :mod:`~anec.models.gpt2`, :mod:`~anec.models.llama`
  and :mod:`~anec.models.bert` generate the IR of each architecture;
* :mod:`anec.models.generate` runs prefill, KV-cache decode and sampling;
* :mod:`anec.models.lora` turns projections into base + LoRA with the adapter as inputs;
* :mod:`anec.models.export` writes a checkpoint's programs as ``.ir`` files.

Modules are imported on use; importing ``anec.models`` loads nothing heavy.
"""
