-- Admission: re-parenting a workarea rewrites the derived path on every
-- index row in the same transaction (docs/design.md §Workareas), so admission may
-- update that one column of the index tables; it still cannot write text or vectors.
GRANT UPDATE (path) ON memories_fts, memory_embeddings, sim_memories_fts, sim_memory_embeddings TO oml_admission;
