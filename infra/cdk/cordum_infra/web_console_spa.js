// CloudFront Function (cloudfront-js-2.0), viewer request of the console's default
// behaviour only (cordum_infra/web_console_edge.py), so /api/* and the stream's paths
// never pass through it.
//
// In:  event.request (uri without query string, which stays in request.querystring).
// Out: the request; a path whose last segment has no file extension ("/", "/runs",
//      "/runs/4f2a") is one of the app's own routes and is asked of the bucket as
//      /index.html, so a reload or a shared link opens the app, which reads the path
//      from the address bar. Anything with an extension is asked as it is: a missing
//      file stays an error from the bucket, never an index.html served as a script.
// An extension is what Python's PurePosixPath.suffix calls one (a dot inside the last
// segment, neither its first nor its last character), the test of the local console
// server (localstack/web_console.py), so both route a path alike.
function handler(event) {
  var request = event.request;
  var uri = request.uri;
  var last = uri.substring(uri.lastIndexOf('/') + 1);
  var dot = last.lastIndexOf('.');
  if (!(dot > 0 && dot < last.length - 1)) {
    request.uri = '/index.html';
  }
  return request;
}
