import DNSCore
import DaemonHTTP
import DaemonListening
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import ServiceLifecycle

/// Counts a connection's bytes until its request head is complete and answers 431 past the limit
/// (the HTTP decoder's own limit is 80 KB). Removed once the head is in.
final class HeaderBudget: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    private let limit: Int
    private var seen = 0
    private var refused = false

    init(limit: Int) { self.limit = limit }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !refused else { return }
        seen += unwrapInboundIn(data).readableBytes
        guard seen <= limit else {
            refused = true
            let text = "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            let channel = context.channel
            context.writeAndFlush(NIOAny(channel.allocator.buffer(string: text))).whenComplete { _ in channel.close(promise: nil) }
            return
        }
        context.fireChannelRead(data)
    }
}
