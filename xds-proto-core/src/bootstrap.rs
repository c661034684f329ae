//! STUB: the bootstrap parser is being written.
