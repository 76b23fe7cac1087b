package main

// Help text shared by the commands that run trials.

// studySpaceHelp says what the default search space is, in the words of
// what it holds.
const studySpaceHelp = `
The default search space is the BERT-family study on a 24 GiB card: a
5000-trial Optuna search that fine-tuned seven models (bert-base,
bert-large, roberta-base, roberta-large, deberta-v3-base, deberta-v3-large,
xlm-roberta-base) with batch size 8 to 64, sequence length 128 to 512 and
gradient accumulation 1 to 8, the large models and XLM-RoBERTa limited to
batch 8 to 16, length 128 to 384 and accumulation 1 to 4 (its model-aware
limits, added after OOMs); fp32, AdamW, dynamic padding (docs/trials.md).
`

// allocSettingsHelp explains the allocator settings --alloc-conf takes.
const allocSettingsHelp = `
Allocator settings (--alloc-conf, PYTORCH_CUDA_ALLOC_CONF syntax, joined
with commas):
  "" (PyTorch's defaults)
      memory comes from cudaMalloc in segments (2 MiB for requests up to
      1 MiB, 20 MiB for those up to 10 MiB, else the request rounded up to
      2 MiB) and stays cached when freed; a cached block is split to serve
      smaller requests, so one live block keeps its whole segment reserved
  expandable_segments:True
      one growing virtual range per stream instead of many segments: pages
      are mapped as blocks need them and unmapped by empty_cache, so
      changing sizes do not strand memory between segments
  max_split_size_mb:N
      cached blocks of N MiB or more are never split for a smaller
      request: big blocks stay whole for big requests
  garbage_collection_threshold:F
      when reserved memory passes F (0 to 1) of the GPU's, cached blocks
      unused for longest are freed before asking the GPU for more
  roundup_power2_divisions:N
      round request sizes up to N steps per power of two, so that
      slightly different sizes reuse the same cached blocks
`
