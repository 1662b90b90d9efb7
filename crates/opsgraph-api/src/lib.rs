//! The API of Opsgraph as types: the documents `opsgraph serve` answers with (`dto`), built
//! from stored records in one place (`views`), and the `Client` the CLI's commands run over.
//!
//! The server's handlers serialize these types; the CLI's clients return them, so the wire
//! format, the local commands and the remote commands share one definition of each document.

pub mod client;
pub mod dto;
pub mod listing;
pub mod replies;
pub mod views;

pub use client::{
    family, find_gate, gate_value, last_seq, root_of, timeline_after, Client, Control, Cursor, PatchRequest,
};
pub use dto::*;
pub use listing::{InvalidQuery, OperationQuery};
pub use replies::*;
