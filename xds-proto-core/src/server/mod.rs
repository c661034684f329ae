//! xDS-enabled servers (gRFC A36), sans-IO: the Listener a server subscribes to, the
//! filter chain each accepted connection gets, and the serving mode a runtime observes.
