// Package actors runs the group coordinator on protoactor-go.
//
// The groups actor (router) owns a group actor per group id: it creates them
// on demand, answers requests for groups that do not exist, keeps a summary of
// every group for ListGroups, and stops a group actor when its group is gone.
// A group actor owns one coordinator.Group (the pure state machine), its
// timers and its in-flight writes: it calls the machine with the clock's time
// and executes the effects the machine returns. It never blocks: writes go to
// a Store whose completion comes back as a message, and timers fire as
// messages that carry their identity so stale fires are dropped.
//
// A panic in a group actor is contained by supervision: the actor restarts,
// and the new instance rebuilds its group from the store.
package actors
