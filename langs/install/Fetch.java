// sandq library installer for Java: java Fetch.java REPO DIR GROUP:ARTIFACT:VERSION...
//
// Downloads each artifact's jar from a Maven-layout repository into DIR.
// Dependencies are not resolved: list every jar a program needs. When
// SSL_CERT_FILE names a PEM bundle, TLS trusts exactly its certificates.
import java.io.InputStream;
import java.net.URI;
import java.net.ProxySelector;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.security.KeyStore;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.time.Duration;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

public class Fetch {
    public static void main(String[] args) throws Exception {
        String repo = args[0].replaceAll("/+$", "");
        Path dir = Path.of(args[1]);
        Files.createDirectories(dir);
        // The install container's only way out is the proxy that the
        // http(s).proxyHost properties name (sandq sets them).
        HttpClient.Builder b = HttpClient.newBuilder()
            .proxy(ProxySelector.getDefault())
            .followRedirects(HttpClient.Redirect.NORMAL)
            .connectTimeout(Duration.ofSeconds(30));
        String pem = System.getenv("SSL_CERT_FILE");
        if (pem != null && !pem.isEmpty()) {
            b.sslContext(trusting(Path.of(pem)));
        }
        HttpClient http = b.build();
        int failed = 0;
        for (int i = 2; i < args.length; i++) {
            String[] c = args[i].split(":");
            String url = repo + "/" + c[0].replace('.', '/') + "/" + c[1] + "/" + c[2] + "/" + c[1] + "-" + c[2] + ".jar";
            HttpResponse<InputStream> r = http.send(HttpRequest.newBuilder(URI.create(url)).build(),
                HttpResponse.BodyHandlers.ofInputStream());
            try (InputStream in = r.body()) {
                if (r.statusCode() != 200) {
                    System.err.println("sandq: " + args[i] + ": GET " + url + ": HTTP " + r.statusCode());
                    failed++;
                    continue;
                }
                Files.copy(in, dir.resolve(c[1] + "-" + c[2] + ".jar"), StandardCopyOption.REPLACE_EXISTING);
                System.out.println("sandq: " + args[i] + ": " + url);
            }
        }
        if (failed > 0) {
            System.exit(1);
        }
    }

    static SSLContext trusting(Path pem) throws Exception {
        KeyStore ks = KeyStore.getInstance(KeyStore.getDefaultType());
        ks.load(null, null);
        int n = 0;
        try (InputStream in = Files.newInputStream(pem)) {
            for (Certificate cert : CertificateFactory.getInstance("X.509").generateCertificates(in)) {
                ks.setCertificateEntry("ca" + n++, cert);
            }
        }
        TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        tmf.init(ks);
        SSLContext ctx = SSLContext.getInstance("TLS");
        ctx.init(null, tmf.getTrustManagers(), null);
        return ctx;
    }
}
