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
        let loop = client.eventLoopGroup.next()
        let writers = Handoff<HTTPClient.Body.StreamWriter>()
        let finished = loop.makePromise(of: Void.self)
        var requestBody: HTTPClient.Body?
        var pumped = false
        switch body {
        case .empty:
            finished.succeed(())
        case .bytes(let b):
            requestBody = .bytes(b)
            finished.succeed(())
        case .file(_, _, let length, _, _):
            pumped = true
            requestBody = .stream(contentLength: length) { writer in
                // The first call gets the body; a second (a connection retried by the pool
                // after the body began) cannot be replayed from here and fails the request.
                writers.put(writer) ? finished.futureResult : loop.makeFailedFuture(HTTPClientError.bodyLengthMismatch)
            }
        }
        let request: HTTPClient.Request
        do {
            request = try HTTPClient.Request(url: url, method: method, headers: headers, body: requestBody)
        } catch {
            if pumped { finished.succeed(()) }
            throw error
        }
        let delegate = Delegate(streaming: sink != nil)
        let task = client.execute(request: request, delegate: delegate, eventLoop: .delegate(on: loop))
        task.futureResult.whenComplete { _ in
            writers.close()
            delegate.chunks.close()
        }
        if pumped, case .file(let fd, let offset, let length, let limit, let sent) = body {
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
        while let (head, buffer, promise) = delegate.chunks.take() {
            if sinkError == nil, let sink {
                do { try sink(head, buffer) } catch { sinkError = error }
            }
            if let sinkError { promise.fail(sinkError) } else { promise.succeed(()) }
        }
        do {
            let response = try task.futureResult.wait()
            if let sinkError { throw sinkError }
            return response
        } catch {
            throw sinkError ?? error
        }
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
        let chunks = Handoff<(HTTPResponseHead, ByteBuffer, EventLoopPromise<Void>)>()
        private var head: HTTPResponseHead?
        private var body = [UInt8]()

        init(streaming: Bool) { self.streaming = streaming }

        func didReceiveHead(task: HTTPClient.Task<S3Response>, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
            self.head = head
            return task.eventLoop.makeSucceededVoidFuture()
        }

        func didReceiveBodyPart(task: HTTPClient.Task<S3Response>, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
            if streaming, let head, (200..<300).contains(head.status.code) {
                let promise = task.eventLoop.makePromise(of: Void.self)
                if chunks.put((head, buffer, promise)) { return promise.futureResult }
                promise.succeed(())
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
