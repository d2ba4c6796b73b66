// A TCP proxy on loopback that forwards to a port, and on `cut` drops
// traffic as a network partition does: connections, open ones and new
// ones, stay up, and whatever is sent is lost (nothing is refused, nothing
// is answered). `heal` resets the connections it held and forwards again.
// Stopped in teardown.
import net from 'node:net'

interface Teardown { teardown: (fn: () => Promise<void> | void) => void }

export interface TcpProxy {
  readonly port: number
  cut: () => void
  heal: () => void
}

/** Where a proxy listens and where it forwards to: 127.0.0.1 and any free port unless said. */
export interface ProxyAddresses {
  readonly host?: string
  readonly port?: number
  readonly targetHost?: string
}

export async function startTcpProxy (t: Teardown, targetPort: number, addresses: ProxyAddresses = {}): Promise<TcpProxy> {
  const { host = '127.0.0.1', port = 0, targetHost = '127.0.0.1' } = addresses
  let cut = false
  const sockets = new Set<net.Socket>()
  /** Connections accepted while cut, or cut since: their bytes go nowhere. */
  const held = new Set<net.Socket>()
  const track = (socket: net.Socket): void => {
    sockets.add(socket)
    socket.on('error', () => {})
    socket.once('close', () => { sockets.delete(socket); held.delete(socket) })
  }
  const server = net.createServer(client => {
    track(client)
    if (cut) {
      held.add(client)
      client.resume()
      return
    }
    const upstream = net.connect({ host: targetHost, port: targetPort })
    track(upstream)
    const forward = (from: net.Socket, to: net.Socket): void => {
      from.on('data', (chunk: Buffer) => { if (!held.has(from)) to.write(chunk) })
      from.once('close', () => { if (!held.has(from)) to.destroy() })
    }
    forward(client, upstream)
    forward(upstream, client)
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, host, resolve)
  })
  t.teardown(async () => {
    for (const socket of sockets) socket.destroy()
    await new Promise(resolve => server.close(resolve))
  })
  return {
    port: (server.address() as net.AddressInfo).port,
    cut: () => {
      cut = true
      for (const socket of sockets) held.add(socket)
    },
    heal: () => {
      cut = false
      for (const socket of held) socket.resetAndDestroy()
    }
  }
}
