//! Opening storage: the one place where a URL becomes a store. A `postgres://` or
//! `postgresql://` URL is PostgreSQL (`opsgraph-store-pg`); `sqlite://PATH` or a plain path is a
//! SQLite file, created if needed (`opsgraph-store-sqlite`). Neither backend knows the other;
//! this module is where the binary chooses.

use std::path::Path;

use opsgraph_store::{Error, Store};
pub use opsgraph_store_sqlite::Durability;

/// Opens (and migrates) the store a URL names.
pub fn open(url: &str, durability: Durability) -> Result<Box<dyn Store>, Error> {
    if opsgraph_store::is_postgres(url) {
        return opsgraph_store_pg::open(url);
    }
    opsgraph_store_sqlite::open(Path::new(url.strip_prefix("sqlite://").unwrap_or(url)), durability)
}
