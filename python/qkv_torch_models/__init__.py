"""The PyTorch side of qkv's run folders: qkv's models as torch.nn modules (models.py, layers.py,
positions.py), the parameter-name mapping between the two (names.py) and the vocabularies
(vocab.py). python/qkv_torch.py is the front door: load_run, save_run, translate, predict."""
