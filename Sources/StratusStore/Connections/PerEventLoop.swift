import NIOCore
import NIOPosix

/// One value per event loop of the process's event-loop group (or one for all of them), picked
/// by the loop the caller runs on. Requests run on their HTTP connection's loop
/// (`StratusHTTPChannel`), so what they use through it stays on their own thread.
struct PerEventLoop<Value: Sendable>: Sendable {
    /// One per loop of `loops`, in order; a single value serves every loop when `loops` is empty.
    let values: [Value]
    private let loops: [any EventLoop]

    /// The loops of the process's event-loop group.
    static var groupLoops: [any EventLoop] { Array(MultiThreadedEventLoopGroup.singleton.makeIterator()) }

    /// One value for each loop of the group.
    init(_ make: (any EventLoop, _ index: Int, _ count: Int) -> Value) {
        let loops = Self.groupLoops
        self.loops = loops
        self.values = loops.enumerated().map { make($1, $0, loops.count) }
    }

    /// One value for every loop.
    init(single value: Value) {
        self.loops = []
        self.values = [value]
    }

    /// A value for each loop `self` has, made by `make`.
    func map<Other>(_ make: () -> Other) -> PerEventLoop<Other> {
        PerEventLoop<Other>(values: values.map { _ in make() }, loops: loops)
    }

    private init(values: [Value], loops: [any EventLoop]) {
        self.values = values
        self.loops = loops
    }

    /// The value of the caller's loop; callers on none (start-up, background work, tests) get the first.
    var current: Value {
        if values.count > 1, let loop = MultiThreadedEventLoopGroup.currentEventLoop,
           let index = loops.firstIndex(where: { $0 === loop }) {
            return values[index]
        }
        return values[0]
    }
}
