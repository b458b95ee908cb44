package actors

import (
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// workers run short tasks on goroutines that outlive them. A goroutine
// started for each task begins with a small stack, which the handling of a
// group (a join phase completing, a spawn, the router's bookkeeping) grows
// by copying it, twice or more, every time; a worker's stack stays grown
// between tasks. A task goes to an idle worker when there is one and to a
// new worker otherwise, so nothing ever waits for a worker; a worker with
// nothing to do for workerIdle ends.
//
// One set of workers serves one Service (inside a testing/synctest bubble,
// its channel and timers belong to the bubble the Service started in).
type workers struct {
	work chan func()
	stop chan struct{} // closed by close: idle workers end
	once sync.Once
}

// workerIdle is how long a worker waits for another task before it ends.
const workerIdle = 5 * time.Second

func newWorkers() *workers { return &workers{work: make(chan func()), stop: make(chan struct{})} }

// run runs fn on an idle worker, or on a new one. It never blocks.
func (w *workers) run(fn func()) {
	select {
	case w.work <- fn:
	default:
		go w.loop(fn)
	}
}

// close ends the idle workers and every worker once its task is done;
// tasks run after it get a goroutine each.
func (w *workers) close() { w.once.Do(func() { close(w.stop) }) }

func (w *workers) loop(fn func()) {
	fn()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		select {
		case fn := <-w.work:
			fn()
			idle.Reset(workerIdle)
		case <-idle.C:
			return
		case <-w.stop:
			return
		}
	}
}

// workerDispatcher is a protoactor dispatcher that processes mailboxes on
// workers: the router's, which every new group and every group's first
// report wake, would otherwise start a goroutine each time.
type workerDispatcher struct {
	w          *workers
	throughput int
}

var _ actor.Dispatcher = (*workerDispatcher)(nil)

// routerThroughput is how many messages the router handles before it
// yields (protoactor's default dispatcher's figure).
const routerThroughput = 300

func (d *workerDispatcher) Schedule(fn func()) { d.w.run(fn) }

func (d *workerDispatcher) Throughput() int { return d.throughput }
