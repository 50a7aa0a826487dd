//! Waiting for a held key: the queue a waiter stands in, the watch for the release, and
//! where a wait ends. Every wait ends by a grant attempt (`lock::grant`) deciding.
//!
//! | module           | owns                                                                |
//! |------------------|---------------------------------------------------------------------|
//! | `waiter`         | a waiter's life as one pure `step(state, event)`, with its table    |
//! | `waiter/effects` | what a step changes in the key's queue before the next thing        |
//! | `waiter/events`  | what a driver reports to a step, and what a step has it do          |
//! | `fifo`           | FIFO waits (the default): the async driver that performs each step  |
//! | `queue`          | the in-memory FIFO queues per key, and the offer a release hands on |
//! | `durable`        | durable waits (`fairness: durable`): `/q/` entries in create order  |
//! | `durable/head`   | a durable key's first waiter, as a release handing it on reads it   |
//! | `release_watch`  | waiting for the holder's release on the store's watch hub           |
//! | `wait_end`       | where a wait ends: the caller's deadline or the drain               |
//!
//! May import: `lock::grant` and `lock::sessions` (the attempt a wait runs), `store`,
//! `error`, `ops`. Never `lock::{release, set, shared}`, `cluster` or `serve`: those
//! import the wait.

pub(crate) mod durable;
pub(crate) mod fifo;
pub(crate) mod queue;
pub(crate) mod release_watch;
pub(crate) mod wait_end;
pub(crate) mod waiter;
