# sandq java sandbox image (without the agent; scripts/images.sh adds it on top).
# Same conventions as python.Dockerfile: built FROM sandq/base:<hash> by `make images`, Debian
# packages only, job uid 1000, read-only rootfs at run time (only /work and /tmp are writable).
#
# OpenJDK 17 (bookworm), headless JDK only.
#
# Speed: javac spends most of a small compile loading and linking its own classes. Two dynamic
# class-data-sharing archives (JDK 13+ -XX:ArchiveClassesAtExit), made here from a compile and
# a run of a typical program, hold those classes ready to map: javac.jsa for the compiler and
# run.jsa for the JDK classes a program commonly touches (collections, streams, lambdas,
# records, String.format). With the flags in langs.go (serial GC, C1 only for javac, no
# hsperfdata file) a hello world compiles in ~0.7 s of CPU instead of ~2.3 s, and starts in
# ~0.15 s. The archives are mapped read-only; a JVM that cannot use one (other build, flags)
# silently runs without it (-Xshare:auto).
ARG BASE=debian:bookworm-slim
FROM ${BASE}

ARG DEBIAN_FRONTEND=noninteractive
RUN set -eux; \
    mkdir -p /usr/share/man/man1; \
    apt-get update; \
    apt-get -y upgrade; \
    apt-get install -y --no-install-recommends \
        openjdk-17-jdk-headless; \
    apt-get clean; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old /var/lib/dpkg/*-old; \
    find /var/log -type f -delete; \
    groupadd --gid 1000 sandbox; \
    useradd --uid 1000 --gid 1000 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin \
        --comment 'sandq job' sandbox; \
    mkdir -p /work /sandq /usr/lib/sandq/java

ENV LANG=C.UTF-8 \
    HOME=/tmp

RUN set -eux; \
    d=$(mktemp -d); cd "$d"; \
    printf '%s\n' \
        'import java.io.*;' \
        'import java.util.*;' \
        'import java.util.function.*;' \
        'import java.util.stream.*;' \
        '' \
        'public class Main {' \
        '    record Pair(int a, String b) {}' \
        '    interface Shape { double area(); }' \
        '    static long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }' \
        '    public static void main(String[] args) throws IOException {' \
        '        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));' \
        '        String line = in.readLine();' \
        '        List<Integer> xs = new ArrayList<>(Arrays.asList(3, 1, 2));' \
        '        Collections.sort(xs, Comparator.reverseOrder());' \
        '        Map<String, Integer> m = new HashMap<>();' \
        '        m.merge("a", 1, Integer::sum);' \
        '        TreeMap<Integer, String> t = new TreeMap<>(Map.of(1, "x", 2, "y"));' \
        '        Deque<Integer> q = new ArrayDeque<>(); q.push(1);' \
        '        PriorityQueue<Long> pq = new PriorityQueue<>(); pq.add(fib(20));' \
        '        Set<String> s = xs.stream().map(String::valueOf).collect(Collectors.toCollection(HashSet::new));' \
        '        Function<Integer, Integer> sq = x -> x * x;' \
        '        Shape c = () -> Math.PI;' \
        '        int[] arr = IntStream.range(0, 10).map(i -> sq.apply(i)).toArray();' \
        '        Arrays.sort(arr);' \
        '        StringBuilder sb = new StringBuilder();' \
        '        for (String w : "a b c".split(" ")) sb.append(w.toUpperCase());' \
        '        Optional<String> o = Optional.ofNullable(line);' \
        '        assert arr.length == 10 : "length";' \
        '        System.out.println(String.format("%s %d %.2f %s %s %s %s", new Pair(1, "b"), m.get("a"),' \
        '            c.area(), t, q.peek() + pq.peek(), s, sb + o.orElse("") + Arrays.toString(arr)));' \
        '    }' \
        '}' >Main.java; \
    javac -J-XX:+UseSerialGC -J-XX:TieredStopAtLevel=1 -J-XX:-UsePerfData \
        -J-XX:ArchiveClassesAtExit=/usr/lib/sandq/java/javac.jsa -encoding UTF-8 -d . Main.java; \
    echo input | java -XX:+UseSerialGC -XX:-UsePerfData -XX:MaxRAMPercentage=50 -Xss8m \
        -XX:ArchiveClassesAtExit=/usr/lib/sandq/java/run.jsa -ea -cp . Main; \
    cd /; rm -rf "$d"; \
    chmod -R a+rX,go-w /usr/lib/sandq/java; \
    ls -la /usr/lib/sandq/java

WORKDIR /work
