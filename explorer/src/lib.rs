//! The explorer's read model (issue 36): what is held now, by whom, for how long, who
//! waits and which holds look wrong, read from the store a page at a time. `view` is the
//! pure part (reads in, rows out); `read` makes the bounded reads. It never holds a token.

pub mod read;
pub mod view;

pub use read::{
    Cursor, MAX_PAGE, Page, ReadError, SESSION_KEYS, held_count, namespaces, one_key, page, session,
};
pub use view::{Flag, Mode, Row, Rules, Seen, SessionSeen, SessionView, rows, session_view};
