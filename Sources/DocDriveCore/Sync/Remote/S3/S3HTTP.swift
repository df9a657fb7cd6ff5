// S3HTTP: the process's one HTTP client for S3, and the bridge from the remote's blocking
// callers (upload and sync worker threads, never FUSE request threads, never an event loop) to
// AsyncHTTPClient: bodies are read from a descriptor with pread and responses written to one
// by the calling thread, a chunk at a time, so no file is ever whole in memory.
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
#if canImport(Glibc)
import Glibc
#endif

/// What a request sends (used on the calling thread only).
enum S3Body {
    case empty
    case bytes([UInt8])
    /// `length` bytes of the descriptor from `offset`, read in chunks as the connection takes
    /// them; `sent` hears of each chunk.
    case file(fd: Int32, offset: Int64, length: Int64, limit: BandwidthLimit?, sent: ((Int) -> Void)?)

    var length: Int64 {
        switch self {
        case .empty: return 0
        case .bytes(let b): return Int64(b.count)
        case .file(_, _, let length, _, _): return length
        }
    }
}

/// A response: status, headers, and the body when it was kept (error documents, listings,
/// small replies; a download's body goes to its sink instead).
struct S3Response: Sendable {
    var status: Int
    var headers: HTTPHeaders
    var body: [UInt8]

    func header(_ name: String) -> String? { headers.first(name: name) }
    var headerPairs: [(String, String)] { headers.map { ($0.name, $0.value) } }
}

/// Why a transfer stopped on our side (not the server's).
enum S3LocalFailure: Error {
    /// The local file ended before `length` bytes were read: it changed during the upload.
    case shortRead(Int64)
    case read(Int32)
    case write(Int32)
}

enum S3HTTP {
    /// One client for every S3 store of the process: its connection pool is shared, keeps
    /// idle connections a minute, and allows many at once (parts and workers of several stores).
    static let client: HTTPClient = {
        var c = HTTPClient.Configuration(redirectConfiguration: .disallow,
                                         timeout: .init(connect: .seconds(10), read: .seconds(60)),
                                         decompression: .disabled)
        c.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: 128)
        // A refused connection is an answer: our own retries (with back-off) decide what next.
        c.connectionPool.retryConnectionEstablishment = false
        c.httpVersion = .http1Only
        return HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: c)
    }()

    /// How much of a file one write to the connection carries.
    static let chunkSize = 1 << 20

    /// Sends one request and waits for its whole answer on the calling thread (which must not
    /// be an event loop). A successful (2xx) body goes to `sink` chunk by chunk when given;
    /// other bodies are kept, up to 1 MiB. Throws what the transport or `sink` threw.
    static func execute(method: HTTPMethod, url: String, headers: HTTPHeaders, body: S3Body,
                        sink: ((HTTPResponseHead, ByteBuffer) throws -> Void)?) throws -> S3Response {
        // Every promise completed and every callback registered from this thread wakes the
        // event loop (a write to its eventfd, a context switch): a small download had four such
        // hops for one request. Now it has one, the `whenComplete` below: a body from memory
        // needs no promise, chunks are taken without one while few are queued, and the answer
        // is read from what `whenComplete` kept, not waited for on the loop.
        let loop = client.eventLoopGroup.next()
        let writers = Handoff<HTTPClient.Body.StreamWriter>()
        var finished: EventLoopPromise<Void>?
        var requestBody: HTTPClient.Body?
        switch body {
        case .empty:
            break
        case .bytes(let b):
            requestBody = .bytes(b)
        case .file(_, _, let length, _, _):
            let done = loop.makePromise(of: Void.self)
            finished = done
            requestBody = .stream(contentLength: length) { writer in
                // The first call gets the body; a second (a connection retried by the pool
                // after the body began) cannot be replayed from here and fails the request.
                writers.put(writer) ? done.futureResult : loop.makeFailedFuture(HTTPClientError.bodyLengthMismatch)
            }
        }
        let request: HTTPClient.Request
        do {
            request = try HTTPClient.Request(url: url, method: method, headers: headers, body: requestBody)
        } catch {
            finished?.succeed(())
            throw error
        }
        let delegate = Delegate(streaming: sink != nil)
        let task = client.execute(request: request, delegate: delegate, eventLoop: .delegate(on: loop))
        let outcome = Outcome()
        task.futureResult.whenComplete { result in
            outcome.set(result)
            writers.close()
            delegate.chunks.close()
        }
        if let finished, case .file(let fd, let offset, let length, let limit, let sent) = body {
            if let writer = writers.take() {
                do {
                    try pump(fd: fd, offset: offset, length: length, limit: limit, sent: sent, into: writer, until: writers)
                    finished.succeed(())
                } catch {
                    finished.fail(error)
                }
            } else {
                finished.succeed(())
            }
        }
        var sinkError: (any Error)?
        while let chunk = delegate.chunks.take() {
            if sinkError == nil, let sink {
                do { try sink(chunk.head, chunk.buffer) } catch {
                    sinkError = error
                    // A chunk taken without a promise cannot say so: the request is cancelled.
                    task.cancel()
                }
            }
            if let promise = chunk.promise {
                if let sinkError { promise.fail(sinkError) } else { promise.succeed(()) }
            }
        }
        // `chunks` is closed only by the `whenComplete` above, after it kept the outcome.
        switch outcome.get() {
        case .success(let response):
            if let sinkError { throw sinkError }
            return response
        case .failure(let error):
            throw sinkError ?? error
        case nil:
            throw sinkError ?? HTTPClientError.cancelled
        }
    }

    /// The task's outcome, set on its event loop, read by the caller after `chunks` closed.
    private final class Outcome: @unchecked Sendable {
        private let lock = NSLock()
        private var result: Result<S3Response, any Error>?
        func set(_ r: Result<S3Response, any Error>) { lock.lock(); result = r; lock.unlock() }
        func get() -> Result<S3Response, any Error>? { lock.lock(); defer { lock.unlock() }; return result }
    }

    /// Reads the file in chunks and writes them to the connection, with at most
    /// `chunksInFlight` written and not yet taken (the connection's back-pressure bounds the
    /// memory; more than one keeps the socket busy while the next chunk is read).
    private static func pump(fd: Int32, offset: Int64, length: Int64, limit: BandwidthLimit?, sent: ((Int) -> Void)?,
                             into writer: HTTPClient.Body.StreamWriter, until done: Handoff<HTTPClient.Body.StreamWriter>) throws {
        var at = offset
        var left = length
        let allocator = ByteBufferAllocator()
        var pending = [(EventLoopFuture<Void>, Int)]()
        while left > 0 && !done.isClosed {
            let want = Int(min(Int64(limit?.chunkSize ?? chunkSize), left))
            var buffer = allocator.buffer(capacity: want)
            var readError: Int32 = 0
            let got = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: want) { ptr -> Int in
                while true {
                    let n = pread(fd, ptr.baseAddress, want, off_t(at))
                    if n < 0 && errno == EINTR { continue }
                    if n < 0 { readError = errno; return 0 }
                    return n
                }
            }
            if readError != 0 { throw S3LocalFailure.read(readError) }
            if got == 0 { throw S3LocalFailure.shortRead(at - offset) }
            limit?.spend(got)
            pending.append((writer.write(.byteBuffer(buffer)), got))
            at += Int64(got)
            left -= Int64(got)
            if pending.count >= chunksInFlight {
                let (future, n) = pending.removeFirst()
                try future.wait()
                sent?(n)
            }
        }
        for (future, n) in pending {
            try future.wait()
            sent?(n)
        }
    }

    static let chunksInFlight = 3

    /// Collects the answer; AsyncHTTPClient calls a delegate's methods one at a time on the
    /// task's event loop, which is what makes its unlocked state safe.
    private final class Delegate: HTTPClientResponseDelegate, @unchecked Sendable {
        typealias Response = S3Response
        let streaming: Bool
        struct Chunk {
            let head: HTTPResponseHead
            let buffer: ByteBuffer
            /// Completed when the caller has written the chunk; nil when it was taken at once.
            let promise: EventLoopPromise<Void>?
        }
        let chunks = Handoff<Chunk>()
        /// While fewer chunks than this wait for the caller, the connection reads on; then it
        /// waits for the caller to write them (at most this many, each at most what one read
        /// of the socket brings, are held in memory).
        static let queuedWithoutWaiting = 4
        private var head: HTTPResponseHead?
        private var body = [UInt8]()

        init(streaming: Bool) { self.streaming = streaming }

        func didReceiveHead(task: HTTPClient.Task<S3Response>, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
            self.head = head
            return task.eventLoop.makeSucceededVoidFuture()
        }

        func didReceiveBodyPart(task: HTTPClient.Task<S3Response>, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
            if streaming, let head, (200..<300).contains(head.status.code) {
                // Only this loop puts chunks, so the queue can only shrink after this count.
                let promise = chunks.count < Self.queuedWithoutWaiting ? nil : task.eventLoop.makePromise(of: Void.self)
                if chunks.put(Chunk(head: head, buffer: buffer, promise: promise)) {
                    return promise?.futureResult ?? task.eventLoop.makeSucceededVoidFuture()
                }
                promise?.succeed(())
                return task.eventLoop.makeFailedFuture(HTTPClientError.cancelled)
            }
            if body.count < 1 << 20 { body += buffer.readableBytesView }
            return task.eventLoop.makeSucceededVoidFuture()
        }

        func didFinishRequest(task: HTTPClient.Task<S3Response>) throws -> S3Response {
            S3Response(status: Int(head?.status.code ?? 0), headers: head?.headers ?? [:], body: body)
        }
    }
}

/// Hands values from event-loop callbacks to a blocked caller thread, in order, until closed.
final class Handoff<T>: @unchecked Sendable {
    private let condition = NSCondition()
    /// Guarded by `condition`.
    private var items = [T]()
    private var closed = false

    /// Queues a value; false when already closed.
    func put(_ item: T) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        if closed { return false }
        items.append(item)
        condition.signal()
        return true
    }

    func close() {
        condition.lock()
        closed = true
        condition.broadcast()
        condition.unlock()
    }

    /// How many values wait to be taken.
    var count: Int {
        condition.lock()
        defer { condition.unlock() }
        return items.count
    }

    var isClosed: Bool {
        condition.lock()
        defer { condition.unlock() }
        return closed
    }

    /// The next value, waiting for one; nil once closed and empty.
    func take() -> T? {
        condition.lock()
        defer { condition.unlock() }
        while items.isEmpty && !closed { condition.wait() }
        return items.isEmpty ? nil : items.removeFirst()
    }
}
