package executor

// What the executor can tell about its own readiness: the daemon's
// /readyz asks each (internal/executornode reports them). Each is cheap
// and reads what the executor keeps; none asks the bus.

// CatalogHealth reports how the executor's catalogue replica is out of
// step with the catalogue bucket, nil when it is in step: calls are
// judged and routed on the replica, and one out of step answers
// TOOL_NOT_FOUND for tools the registry lists.
func (e *Executor) CatalogHealth() error { return e.catalog.Health() }

// PolicyHealth reports that the last policy set offered to the executor
// (pushed to the fleet, or saved in its policy directory) did not load,
// so that it enforces an older one; nil once a later set has loaded.
func (e *Executor) PolicyHealth() error { return e.watcher.Health() }
