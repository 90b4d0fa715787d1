//! Tests of the namespace model: Linux semantics of each operation, and
//! random operation sequences checked against the model's invariants and
//! the key codec.

mod compare;
mod ops;
mod props;
mod rename;
mod xattr;
