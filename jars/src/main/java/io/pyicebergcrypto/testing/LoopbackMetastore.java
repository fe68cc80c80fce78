package io.pyicebergcrypto.testing;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import org.apache.hadoop.hive.conf.HiveConf;
import org.apache.hadoop.hive.metastore.HiveMetaStore;
import org.apache.hadoop.hive.metastore.TSetIpAddressProcessor;
import org.apache.hadoop.hive.metastore.api.ThriftHiveMetastore;
import org.apache.thrift.protocol.TBinaryProtocol;
import org.apache.thrift.server.TServer;
import org.apache.thrift.server.TThreadPoolServer;
import org.apache.thrift.transport.TServerSocket;
import org.apache.thrift.transport.TTransportFactory;

/**
 * A standalone Hive metastore thrift server bound to one address (127.0.0.1 by default).
 *
 * <p>Hive 2.3's own {@code HiveMetaStore -p PORT} always binds every interface (it has no bind-host
 * setting: {@code hive.metastore.thrift.bind.host} came with later Hive versions). This launcher
 * builds the same server as Hive's unsecured path (an {@code HMSHandler} behind {@code RetryingHMSHandler},
 * plain binary thrift, as Iceberg's own {@code TestHiveMetastore} does) on a socket bound to the
 * given address. Hive settings (Derby URL, warehouse, ...) come from {@code -D} system properties,
 * which {@link HiveConf} applies, and any Hadoop setting from {@code --conf key=value}.
 *
 * <pre>
 * java -cp "pyspark/jars/*:pyiceberg-crypto-bridge.jar" -Dhive.async.log.enabled=false \
 *   -Djavax.jdo.option.ConnectionURL=jdbc:derby:;databaseName=/data/metastore_db;create=true \
 *   io.pyicebergcrypto.testing.LoopbackMetastore --host 127.0.0.1 --port 0
 * </pre>
 *
 * <p>Port 0 picks a free port. Once the socket is bound it prints one line {@code LISTENING host:port}
 * on standard output (what {@code pyiceberg_crypto.testing.metastore} waits for).
 */
public final class LoopbackMetastore {
  private LoopbackMetastore() {}

  public static void main(String[] args) throws Exception {
    String host = "127.0.0.1";
    int port = 0;
    int threads = 200; // like hive.metastore.server.max.threads: one per open client connection
    java.util.List<String> settings = new java.util.ArrayList<>();
    for (int i = 0; i < args.length; i++) {
      switch (args[i]) {
        case "--host": host = args[++i]; break;
        case "--port": port = Integer.parseInt(args[++i]); break;
        case "--threads": threads = Integer.parseInt(args[++i]); break;
        case "--conf": settings.add(args[++i]); break;
        default:
          System.err.println("usage: LoopbackMetastore [--host 127.0.0.1] [--port 0] [--threads 200] [--conf key=value ...]");
          System.exit(2);
      }
    }
    HiveConf conf = new HiveConf(LoopbackMetastore.class);
    for (String setting : settings) {
      int eq = setting.indexOf('=');
      if (eq <= 0) {
        System.err.println("--conf needs key=value, got: " + setting);
        System.exit(2);
      }
      conf.set(setting.substring(0, eq), setting.substring(eq + 1));
    }
    ThriftHiveMetastore.Iface handler =
        HiveMetaStore.newRetryingHMSHandler("new db based metaserver", conf, false);
    TServerSocket socket =
        new TServerSocket(new InetSocketAddress(InetAddress.getByName(host), port));
    TThreadPoolServer.Args serverArgs =
        new TThreadPoolServer.Args(socket)
            .processor(new TSetIpAddressProcessor<>(handler))
            .transportFactory(new TTransportFactory())
            .protocolFactory(new TBinaryProtocol.Factory())
            .minWorkerThreads(Math.min(4, threads))
            .maxWorkerThreads(threads);
    TServer server = new TThreadPoolServer(serverArgs);
    InetSocketAddress bound = (InetSocketAddress) socket.getServerSocket().getLocalSocketAddress();
    System.out.println("LISTENING " + bound.getAddress().getHostAddress() + ":" + bound.getPort());
    System.out.flush();
    server.serve();
  }
}
