package io.pyicebergcrypto.testing;

import java.io.IOException;
import java.net.URI;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.util.Progressable;

/**
 * A Hadoop file system for object-store URIs ({@code s3://}, {@code s3a://}) inside the loopback
 * metastore only, so that it can record table and database locations without an S3 client.
 *
 * <p>A Hive 2.3 metastore checks that the location of a new database or table "is a directory" and
 * creates it otherwise, through Hadoop's {@code FileSystem} for the location's scheme. Object
 * stores have no directories, and Iceberg never asks the metastore to read or write table files
 * (Iceberg's {@code S3FileIO} in Spark does that, and Iceberg drops tables with
 * {@code deleteData=false}). So this file system answers "directory" for every path and refuses
 * every read, write, rename and delete with a message saying so. Production metastores put
 * {@code hadoop-aws} on their classpath instead (see {@code docker/}).
 */
public final class LocationOnlyFileSystem extends FileSystem {
  private URI uri;
  private Path workingDirectory = new Path("/");

  @Override
  public void initialize(URI name, Configuration conf) throws IOException {
    super.initialize(name, conf);
    this.uri = URI.create(name.getScheme() + "://" + (name.getAuthority() == null ? "" : name.getAuthority()));
    setConf(conf);
  }

  @Override
  public URI getUri() {
    return uri;
  }

  @Override
  public String getScheme() {
    return uri == null ? "s3a" : uri.getScheme();
  }

  @Override
  public FileStatus getFileStatus(Path path) {
    return new FileStatus(0, true, 1, 0, 0, makeQualified(path));
  }

  @Override
  public boolean mkdirs(Path path, FsPermission permission) {
    return true;
  }

  @Override
  public FileStatus[] listStatus(Path path) throws IOException {
    throw refused("list", path);
  }

  @Override
  public FSDataInputStream open(Path path, int bufferSize) throws IOException {
    throw refused("read", path);
  }

  @Override
  public FSDataOutputStream create(Path path, FsPermission permission, boolean overwrite, int bufferSize,
      short replication, long blockSize, Progressable progress) throws IOException {
    throw refused("write", path);
  }

  @Override
  public FSDataOutputStream append(Path path, int bufferSize, Progressable progress) throws IOException {
    throw refused("append to", path);
  }

  @Override
  public boolean rename(Path source, Path target) throws IOException {
    throw refused("rename", source);
  }

  @Override
  public boolean delete(Path path, boolean recursive) throws IOException {
    throw refused("delete", path);
  }

  @Override
  public void setWorkingDirectory(Path directory) {
    workingDirectory = directory;
  }

  @Override
  public Path getWorkingDirectory() {
    return workingDirectory;
  }

  private static IOException refused(String operation, Path path) {
    return new IOException("the loopback metastore does not " + operation + " object storage (" + path
        + "): table files are read and written by Iceberg's FileIO, not by the metastore");
  }
}
