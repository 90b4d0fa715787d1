//! Property tests of the key codec: order, ranges, moves, round trips.

mod moves;
mod order;
mod ranges;
mod roundtrip;
mod strategies;
