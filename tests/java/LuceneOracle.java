/*
 * bbqlib's oracle harness: runs Apache Lucene's own optimized scalar quantization (OSQ) and
 * Lucene104 scorer on raw float32 files and writes what Lucene produced, for
 * tests/test_lucene_oracle.py and benchmarks/quality/lucene.py to compare bit for bit.
 *
 * Compiled at test time against the Lucene 10.5 jar (Java >= 21); see tests/lucene_harness.py.
 *
 * Usage: java -cp lucene.jar:DIR LuceneOracle MANIFEST OUT_DIR
 *
 * MANIFEST has one task per line, tab-separated:
 *   name  mode  dim  docs.f32  n_docs  queries.f32  n_queries  centroid.f32|-  configs
 * where configs is a comma-separated list of SIMILARITY:ENCODING (VectorSimilarityFunction and
 * ScalarEncoding names).
 * mode "index": the docs go through one IndexWriter with one vector field per config (one flushed
 *   segment, Lucene104ScalarQuantizedVectorsFormat with the config's encoding), so the centroid,
 *   the cosine normalization and the codes are the writer's; scores come from the segment's
 *   Lucene104ScalarQuantizedVectorsReader.getRandomVectorScorer.
 * mode "direct": the docs are quantized by OptimizedScalarQuantizer against the given centroid as
 *   they are (no normalization), and scored by Lucene104ScalarQuantizedVectorScorer over an
 *   in-memory QuantizedByteVectorValues.
 * Queries are quantized as the scorer does it (a copy, l2normalize for COSINE, scalarQuantize with
 * the encoding's query bits against the segment centroid).
 *
 * Outputs OUT_DIR/name.SIMILARITY.ENCODING.EXT, little-endian, row-major:
 *   codes   uint8 [n, docPackedLength]   Lucene's stored doc bytes
 *   dcorr   int32 [n, 4]                 floatToIntBits(lower, upper, additional), componentSum
 *   centroid float32 [dim]; centroiddp float32 [1]
 *   qlev    uint8 [nq, discreteDims]     query levels; qpack uint8 [nq, queryPackedLength]
 *   qcorr   int32 [nq, 4]
 *   scores  float32 [nq, n]              RandomVectorScorer.score(ord), ord = doc order
 * and OUT_DIR/meta.json: Lucene version, Constants.HAS_FAST_SCALAR_FMA, whether the vector
 * incubator module is loaded, Java version.
 */

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.apache.lucene.codecs.KnnVectorsFormat;
import org.apache.lucene.codecs.hnsw.FlatVectorScorerUtil;
import org.apache.lucene.codecs.lucene104.Lucene104Codec;
import org.apache.lucene.codecs.lucene104.Lucene104ScalarQuantizedVectorScorer;
import org.apache.lucene.codecs.lucene104.Lucene104ScalarQuantizedVectorsFormat;
import org.apache.lucene.codecs.lucene104.Lucene104ScalarQuantizedVectorsReader;
import org.apache.lucene.codecs.perfield.PerFieldKnnVectorsFormat;
import org.apache.lucene.document.Document;
import org.apache.lucene.document.KnnFloatVectorField;
import org.apache.lucene.index.FieldInfo;
import org.apache.lucene.index.FieldInfos;
import org.apache.lucene.index.IndexWriter;
import org.apache.lucene.index.IndexWriterConfig;
import org.apache.lucene.index.NoMergePolicy;
import org.apache.lucene.index.SegmentInfo;
import org.apache.lucene.index.SegmentInfos;
import org.apache.lucene.index.SegmentReadState;
import org.apache.lucene.index.VectorEncoding;
import org.apache.lucene.index.VectorSimilarityFunction;
import org.apache.lucene.store.ByteBuffersDirectory;
import org.apache.lucene.store.Directory;
import org.apache.lucene.store.IOContext;
import org.apache.lucene.util.Constants;
import org.apache.lucene.util.Version;
import org.apache.lucene.util.VectorUtil;
import org.apache.lucene.util.hnsw.RandomVectorScorer;
import org.apache.lucene.util.quantization.OptimizedScalarQuantizer;
import org.apache.lucene.util.quantization.OptimizedScalarQuantizer.QuantizationResult;
import org.apache.lucene.util.quantization.QuantizedByteVectorValues;
import org.apache.lucene.util.quantization.QuantizedByteVectorValues.ScalarEncoding;

public final class LuceneOracle {
  private static final String FIELD = "v";

  private LuceneOracle() {}

  /** One (similarity, encoding) pair of a task: one vector field of the index. */
  private record Config(VectorSimilarityFunction similarity, ScalarEncoding encoding) {
    static Config parse(String s) {
      String[] f = s.split(":");
      return new Config(VectorSimilarityFunction.valueOf(f[0]), ScalarEncoding.valueOf(f[1]));
    }

    String field() {
      return similarity + "." + encoding;
    }
  }

  /** One line of the manifest. */
  private record Task(
      String name,
      String mode,
      int dim,
      Path docs,
      int n,
      Path queries,
      int nq,
      Path centroid,
      List<Config> configs) {

    static Task parse(String line) {
      String[] f = line.split("\t");
      if (f.length != 9) {
        throw new IllegalArgumentException("expected 9 tab-separated fields: " + line);
      }
      List<Config> configs = new ArrayList<>();
      for (String c : f[8].split(",")) {
        configs.add(Config.parse(c));
      }
      return new Task(
          f[0],
          f[1],
          Integer.parseInt(f[2]),
          Path.of(f[3]),
          Integer.parseInt(f[4]),
          Path.of(f[5]),
          Integer.parseInt(f[6]),
          f[7].equals("-") ? null : Path.of(f[7]),
          configs);
    }
  }

  /** What one config produced: the segment's quantized values and the scores. */
  private record Result(QuantizedByteVectorValues values, float[][] scores) {}

  public static void main(String[] args) throws IOException {
    if (args.length != 2) {
      System.err.println("usage: LuceneOracle MANIFEST OUT_DIR");
      System.exit(2);
    }
    Path out = Path.of(args[1]);
    Files.createDirectories(out);
    writeMeta(out.resolve("meta.json"));
    for (String line : Files.readAllLines(Path.of(args[0]), StandardCharsets.UTF_8)) {
      if (line.isBlank() || line.startsWith("#")) {
        continue;
      }
      run(Task.parse(line), out);
    }
  }

  private static void writeMeta(Path path) throws IOException {
    boolean incubator = ModuleLayer.boot().findModule("jdk.incubator.vector").isPresent();
    String json =
        String.format(
            "{\"lucene\": \"%s\", \"java\": \"%s\", \"has_fast_scalar_fma\": %s,"
                + " \"vector_incubator_module\": %s}%n",
            Version.LATEST,
            Runtime.version(),
            Constants.HAS_FAST_SCALAR_FMA,
            incubator);
    Files.writeString(path, json, StandardCharsets.UTF_8);
  }

  private static void run(Task t, Path out) throws IOException {
    float[][] docs = readFloats(t.docs, t.n, t.dim);
    float[][] queries = readFloats(t.queries, t.nq, t.dim);
    if (t.mode.equals("index")) {
      viaIndex(t, docs, queries, out);
    } else if (t.mode.equals("direct")) {
      float[] centroid = readFloats(t.centroid, 1, t.dim)[0];
      forEachConfig(t, c -> write(t, c, direct(t, c, docs, centroid, queries), queries, out));
    } else {
      throw new IllegalArgumentException("mode must be index or direct, got " + t.mode);
    }
  }

  private static void write(Task t, Config c, Result r, float[][] queries, Path out)
      throws IOException {
    String prefix = t.name + "." + c.field();
    writeDocs(t, c, r.values, out, prefix);
    writeQueries(t, c, r.values, queries, out, prefix);
    ByteBuffer buf = buffer(4L * t.nq * t.n);
    for (float[] row : r.scores) {
      for (float s : row) {
        buf.putFloat(s);
      }
    }
    write(out.resolve(prefix + ".scores"), buf);
  }

  // --------------------------------------------------------------------------- the real writer
  private static void viaIndex(Task t, float[][] docs, float[][] queries, Path out)
      throws IOException {
    Lucene104Codec codec =
        new Lucene104Codec() {
          @Override
          public KnnVectorsFormat getKnnVectorsFormatForField(String field) {
            for (Config c : t.configs) {
              if (c.field().equals(field)) {
                return new Lucene104ScalarQuantizedVectorsFormat(c.encoding);
              }
            }
            throw new IllegalArgumentException(field);
          }
        };
    IndexWriterConfig cfg =
        new IndexWriterConfig()
            .setCodec(codec)
            .setMergePolicy(NoMergePolicy.INSTANCE)
            .setMaxBufferedDocs(IndexWriterConfig.DISABLE_AUTO_FLUSH)
            .setRAMBufferSizeMB(2048)
            .setUseCompoundFile(false);
    ByteBuffersDirectory dir = new ByteBuffersDirectory();
    try (IndexWriter w = new IndexWriter(dir, cfg)) {
      for (float[] v : docs) {
        Document doc = new Document();
        for (Config c : t.configs) {
          doc.add(new KnnFloatVectorField(c.field(), v.clone(), c.similarity));
        }
        w.addDocument(doc);
      }
      w.commit();
    }
    SegmentInfos infos = SegmentInfos.readLatestCommit(dir);
    if (infos.size() != 1 || infos.info(0).info.maxDoc() != t.n) {
      throw new IllegalStateException("expected one segment of " + t.n + " docs");
    }
    SegmentInfo si = infos.info(0).info;
    FieldInfos fis = si.getCodec().fieldInfosFormat().read(dir, si, "", IOContext.DEFAULT);
    forEachConfig(t, c -> {
      try (Lucene104ScalarQuantizedVectorsReader qr = openField(dir, si, fis, c.field())) {
        QuantizedByteVectorValues values = qr.getQuantizedVectorValues(c.field());
        float[][] scores = new float[t.nq][t.n];
        for (int q = 0; q < t.nq; q++) {
          RandomVectorScorer scorer = qr.getRandomVectorScorer(c.field(), queries[q].clone());
          for (int ord = 0; ord < t.n; ord++) {
            scores[q][ord] = scorer.score(ord);
          }
        }
        // read everything needed from the segment before it closes
        write(t, c, new Result(InMemoryValues.copyOf(values, c), scores), queries, out);
      }
    });
  }

  private interface ConfigJob {
    void run(Config c) throws IOException;
  }

  /** Runs ``job`` for every config of ``t``, on as many threads as there are processors. */
  private static void forEachConfig(Task t, ConfigJob job) throws IOException {
    int threads = Math.min(t.configs.size(), Runtime.getRuntime().availableProcessors());
    ExecutorService pool = Executors.newFixedThreadPool(threads);
    try {
      List<Future<?>> futures = new ArrayList<>();
      for (Config c : t.configs) {
        futures.add(
            pool.submit(
                () -> {
                  job.run(c);
                  return null;
                }));
      }
      for (Future<?> f : futures) {
        f.get();
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IOException(e);
    } catch (ExecutionException e) {
      if (e.getCause() instanceof IOException io) {
        throw io;
      }
      throw new RuntimeException(e.getCause());
    } finally {
      pool.shutdownNow();
    }
  }

  /**
   * One field's Lucene104ScalarQuantizedVectorsReader over the flushed segment, opened as
   * SegmentCoreReaders opens it, minus the KnnVectorsFormat name lookup: the jar's
   * META-INF/services list for KnnVectorsFormat names classes that are not in it, so the SPI
   * lookup (DirectoryReader.open) fails there.
   */
  private static Lucene104ScalarQuantizedVectorsReader openField(
      Directory dir, SegmentInfo si, FieldInfos fis, String field) throws IOException {
    FieldInfo fi = fis.fieldInfo(field);
    String format = fi.getAttribute(PerFieldKnnVectorsFormat.PER_FIELD_FORMAT_KEY);
    String suffix = fi.getAttribute(PerFieldKnnVectorsFormat.PER_FIELD_SUFFIX_KEY);
    if (!Lucene104ScalarQuantizedVectorsFormat.NAME.equals(format)) {
      throw new IllegalStateException(field + " written with " + format);
    }
    SegmentReadState state =
        new SegmentReadState(dir, si, fis, IOContext.DEFAULT, format + "_" + suffix);
    return (Lucene104ScalarQuantizedVectorsReader)
        new Lucene104ScalarQuantizedVectorsFormat().fieldsReader(state);
  }

  // --------------------------------------------------------------------- quantizer and scorer only
  private static Result direct(
      Task t, Config c, float[][] docs, float[] centroid, float[][] queries) throws IOException {
    OptimizedScalarQuantizer osq = new OptimizedScalarQuantizer(c.similarity);
    ScalarEncoding enc = c.encoding;
    byte[] levels = new byte[enc.getDiscreteDimensions(t.dim)];
    List<byte[]> packed = new ArrayList<>();
    List<QuantizationResult> corr = new ArrayList<>();
    for (float[] v : docs) {
      corr.add(osq.scalarQuantize(v.clone(), levels, enc.getBits(), centroid));
      packed.add(packDoc(enc, levels));
    }
    float centroidDp = VectorUtil.dotProduct(centroid, centroid);
    InMemoryValues values =
        new InMemoryValues(t.dim, packed, corr, centroid, centroidDp, c.similarity, enc);
    Lucene104ScalarQuantizedVectorScorer scorer =
        new Lucene104ScalarQuantizedVectorScorer(FlatVectorScorerUtil.getLucene99FlatVectorsScorer());
    float[][] scores = new float[t.nq][t.n];
    for (int q = 0; q < t.nq; q++) {
      RandomVectorScorer s = scorer.getRandomVectorScorer(c.similarity, values, queries[q].clone());
      for (int ord = 0; ord < t.n; ord++) {
        scores[q][ord] = s.score(ord);
      }
    }
    return new Result(values, scores);
  }

  /** The doc bytes as Lucene104ScalarQuantizedVectorsWriter.writeVectors packs them. */
  private static byte[] packDoc(ScalarEncoding enc, byte[] levels) {
    switch (enc) {
      case SINGLE_BIT_QUERY_NIBBLE -> {
        byte[] p = new byte[enc.getDocPackedLength(levels.length)];
        OptimizedScalarQuantizer.packAsBinary(levels, p);
        return p;
      }
      case DIBIT_QUERY_NIBBLE -> {
        byte[] p = new byte[enc.getDocPackedLength(levels.length)];
        OptimizedScalarQuantizer.transposeDibit(levels, p);
        return p;
      }
      case PACKED_NIBBLE -> {
        byte[] p = new byte[enc.getDocPackedLength(levels.length)];
        for (int i = 0; i < p.length; i++) { // OffHeapScalarQuantizedVectorValues.packNibbles
          p[i] = (byte) ((levels[i] << 4) | levels[p.length + i]);
        }
        return p;
      }
      default -> {
        return levels.clone();
      }
    }
  }

  // ------------------------------------------------------------------------------------ outputs
  private static void writeDocs(
      Task t, Config cfg, QuantizedByteVectorValues values, Path out, String prefix)
      throws IOException {
    int len = cfg.encoding.getDocPackedLength(cfg.encoding.getDiscreteDimensions(t.dim));
    ByteBuffer codes = buffer((long) t.n * len);
    ByteBuffer corr = buffer(16L * t.n);
    for (int ord = 0; ord < t.n; ord++) {
      byte[] v = values.vectorValue(ord);
      if (v.length != len) {
        throw new IllegalStateException("packed length " + v.length + " != " + len);
      }
      codes.put(v);
      putResult(corr, values.getCorrectiveTerms(ord));
    }
    write(out.resolve(prefix + ".codes"), codes);
    write(out.resolve(prefix + ".dcorr"), corr);
    ByteBuffer c = buffer(4L * t.dim);
    for (float x : values.getCentroid()) {
      c.putFloat(x);
    }
    write(out.resolve(prefix + ".centroid"), c);
    write(out.resolve(prefix + ".centroiddp"), buffer(4).putFloat(values.getCentroidDP()));
  }

  /** Query levels, packed bytes and corrections, as Lucene104ScalarQuantizedVectorScorer makes. */
  private static void writeQueries(
      Task t, Config cfg, QuantizedByteVectorValues values, float[][] queries, Path out,
      String prefix) throws IOException {
    ScalarEncoding enc = cfg.encoding;
    OptimizedScalarQuantizer osq = new OptimizedScalarQuantizer(cfg.similarity);
    int discrete = enc.getDiscreteDimensions(t.dim);
    int packedLen = enc.isAsymmetric() ? enc.getQueryPackedLength(discrete) : discrete;
    ByteBuffer lev = buffer((long) t.nq * discrete);
    ByteBuffer pack = buffer((long) t.nq * packedLen);
    ByteBuffer corr = buffer(16L * t.nq);
    float[] centroid = values.getCentroid();
    for (float[] q : queries) {
      float[] copy = q.clone();
      if (cfg.similarity == VectorSimilarityFunction.COSINE) {
        VectorUtil.l2normalize(copy);
      }
      byte[] levels = new byte[discrete];
      putResult(corr, osq.scalarQuantize(copy, levels, enc.getQueryBits(), centroid));
      lev.put(levels);
      if (enc.isAsymmetric()) {
        byte[] p = new byte[packedLen];
        OptimizedScalarQuantizer.transposeHalfByte(levels, p);
        pack.put(p);
      } else {
        pack.put(levels);
      }
    }
    write(out.resolve(prefix + ".qlev"), lev);
    write(out.resolve(prefix + ".qpack"), pack);
    write(out.resolve(prefix + ".qcorr"), corr);
  }

  private static void putResult(ByteBuffer buf, QuantizationResult r) {
    buf.putInt(Float.floatToRawIntBits(r.lowerInterval()));
    buf.putInt(Float.floatToRawIntBits(r.upperInterval()));
    buf.putInt(Float.floatToRawIntBits(r.additionalCorrection()));
    buf.putInt(r.quantizedComponentSum());
  }

  // ---------------------------------------------------------------------------------- raw files
  private static float[][] readFloats(Path path, int rows, int dim) throws IOException {
    ByteBuffer buf = ByteBuffer.wrap(Files.readAllBytes(path)).order(ByteOrder.LITTLE_ENDIAN);
    if (buf.capacity() != 4L * rows * dim) {
      throw new IllegalArgumentException(
          path + ": " + buf.capacity() + " bytes, expected " + (4L * rows * dim));
    }
    float[][] out = new float[rows][dim];
    for (float[] row : out) {
      buf.asFloatBuffer().get(row);
      buf.position(buf.position() + 4 * dim);
    }
    return out;
  }

  private static ByteBuffer buffer(long size) {
    return ByteBuffer.allocate(Math.toIntExact(size)).order(ByteOrder.LITTLE_ENDIAN);
  }

  private static void write(Path path, ByteBuffer buf) throws IOException {
    buf.flip();
    try (FileChannel ch =
        FileChannel.open(
            path,
            StandardOpenOption.CREATE,
            StandardOpenOption.WRITE,
            StandardOpenOption.TRUNCATE_EXISTING)) {
      while (buf.hasRemaining()) {
        ch.write(buf);
      }
    }
  }

  // ------------------------------------------------------------------- in-memory quantized values
  /** QuantizedByteVectorValues over arrays: what the scorer needs, nothing else. */
  private static final class InMemoryValues extends QuantizedByteVectorValues {
    private final int dim;
    private final List<byte[]> packed;
    private final List<QuantizationResult> corrections;
    private final float[] centroid;
    private final float centroidDp;
    private final VectorSimilarityFunction similarity;
    private final ScalarEncoding encoding;

    InMemoryValues(
        int dim,
        List<byte[]> packed,
        List<QuantizationResult> corrections,
        float[] centroid,
        float centroidDp,
        VectorSimilarityFunction similarity,
        ScalarEncoding encoding) {
      this.dim = dim;
      this.packed = packed;
      this.corrections = corrections;
      this.centroid = centroid;
      this.centroidDp = centroidDp;
      this.similarity = similarity;
      this.encoding = encoding;
    }

    static InMemoryValues copyOf(QuantizedByteVectorValues v, Config c) throws IOException {
      List<byte[]> packed = new ArrayList<>();
      List<QuantizationResult> corr = new ArrayList<>();
      for (int ord = 0; ord < v.size(); ord++) {
        packed.add(v.vectorValue(ord).clone());
        corr.add(v.getCorrectiveTerms(ord));
      }
      return new InMemoryValues(
          v.dimension(),
          packed,
          corr,
          v.getCentroid().clone(),
          v.getCentroidDP(),
          c.similarity,
          c.encoding);
    }

    @Override
    public int dimension() {
      return dim;
    }

    @Override
    public int size() {
      return packed.size();
    }

    @Override
    public byte[] vectorValue(int ord) {
      return packed.get(ord);
    }

    @Override
    public QuantizationResult getCorrectiveTerms(int ord) {
      return corrections.get(ord);
    }

    @Override
    public OptimizedScalarQuantizer getQuantizer() {
      return new OptimizedScalarQuantizer(similarity);
    }

    @Override
    public ScalarEncoding getScalarEncoding() {
      return encoding;
    }

    @Override
    public float[] getCentroid() {
      return centroid;
    }

    @Override
    public float getCentroidDP() {
      return centroidDp;
    }

    @Override
    public InMemoryValues copy() {
      return this;
    }

    @Override
    public VectorEncoding getEncoding() {
      return VectorEncoding.BYTE;
    }
  }
}
