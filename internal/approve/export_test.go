package approve

// StopFollowingTheStream stops a's reads of the stream of confirmations,
// as if its copy of the stream had fallen behind: only the live
// subscription is left.
func StopFollowingTheStream(a *Approver) { a.stopReading() }
