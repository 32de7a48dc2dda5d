/** A streamed `text/event-stream` answer whose chunks a test writes as it goes. */
export class FakeEventStream {
  private controller!: ReadableStreamDefaultController<Uint8Array>;
  private readonly encoder = new TextEncoder();
  readonly response: Response;

  constructor(status = 200, contentType = 'text/event-stream') {
    const body = new ReadableStream<Uint8Array>({
      start: (controller) => {
        this.controller = controller;
      },
    });
    this.response = new Response(body, { status, headers: { 'Content-Type': contentType } });
  }

  write(text: string): void {
    this.controller.enqueue(this.encoder.encode(text));
  }

  event(type: string, data: unknown, id?: string): void {
    this.write(`${id ? `id: ${id}\n` : ''}event: ${type}\ndata: ${JSON.stringify(data)}\n\n`);
  }

  end(): void {
    this.controller.close();
  }

  fail(): void {
    this.controller.error(new TypeError('network error'));
  }
}
